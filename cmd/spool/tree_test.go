package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

// TestPrintTreeDrawsBranches: `thread tree` draws each level's last entry
// with └─ and carries │ down only past entries that have more below.
func TestPrintTreeDrawsBranches(t *testing.T) {
	t.Parallel()
	node := func(id string, under ...*orchestrator.TreeNode) *orchestrator.TreeNode {
		return &orchestrator.TreeNode{ThreadID: id, Status: thread.StatusCompleted, Turns: 1, Children: under}
	}
	root := node("root", node("a", node("a1"), node("a2")), node("b", node("b1")))
	root.Forks = []*orchestrator.TreeNode{node("f")}
	root.Continuation = node("root2", node("c"))
	var b bytes.Buffer
	printTree(&b, root, "", "")
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(b.String()), "\n") {
		id, _, _ := strings.Cut(l, "  completed")
		got = append(got, id)
	}
	want := []string{
		"root",
		"├─ a",
		"│  ├─ a1",
		"│  └─ a2",
		"├─ b",
		"│  └─ b1",
		"├─ ⑂ f",
		"└─ ↳ root2",
		"   └─ c",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("tree (-want +got):\n%s", diff)
	}
}

// A child that runs without capabilities its directive asks for says so
// on its line of `thread tree`.
func TestPrintTreeDroppedCapabilities(t *testing.T) {
	t.Parallel()
	kid := &orchestrator.TreeNode{ThreadID: "kid", Status: thread.StatusCompleted, DroppedCapabilities: []string{"rye.execute.tool.acme.secret"}}
	var b bytes.Buffer
	printTree(&b, &orchestrator.TreeNode{ThreadID: "root", Status: thread.StatusCompleted, Children: []*orchestrator.TreeNode{kid}}, "", "")
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 2)
	require.NotContains(t, lines[0], "runs without")
	require.True(t, strings.HasSuffix(lines[1], "  ⚠ runs without rye.execute.tool.acme.secret: its parent does not hold them"), lines[1])
}
