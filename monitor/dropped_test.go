package monitor_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// A child that runs without capabilities its directive asks for (its
// parent does not hold them) carries a warning on its row in its parent's
// tree and on its own page.
func TestDroppedCapabilitiesWarning(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	parent := e.start("t/echo", map[string]any{"text": "hello"})
	e.wait(parent.ThreadID)
	kid, err := e.orch.Runtime().Services().Registry.Register(t.Context(), registry.NewThread{ThreadID: parent.ThreadID + "/greedy-1", Directive: "t/greedy",
		ParentID: parent.ThreadID, Limits: thread.DefaultLimits(), Capabilities: []string{"rye.execute.tool.rye.file-system.*"},
		DroppedCapabilities: []string{"rye.execute.tool.acme.secret", "rye.load.knowledge.vault.*"}})
	require.NoError(t, err)
	const warning = `⚠ runs without <code>rye.execute.tool.acme.secret</code>, <code>rye.load.knowledge.vault.*</code>: its parent does not hold them`

	body := e.page(threadURL(parent.ThreadID))
	_, row, found := strings.Cut(body, `href="/threads/`+kid.ThreadID+`"`)
	require.True(t, found, "the child is in the parent's tree")
	row, _, _ = strings.Cut(row, "</div>")
	require.Contains(t, row, warning, "the child's row in the tree")
	require.Equal(t, 1, strings.Count(body, "⚠ runs without"), "the parent itself dropped nothing")

	body = e.page(threadURL(kid.ThreadID))
	require.Contains(t, body, warning, "the child's own page")
}
