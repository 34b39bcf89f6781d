package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestGraphMCP drives graph runs through `spool mcp` as an MCP client
// would: run_graph waiting for the end, show_graph's node table,
// wait_thread and cancel_thread on a run's id (its waiting children
// cancelled with it), approve_call on an approval node, and the tool
// errors of what cannot be done.
func TestGraphMCP(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.Command(e.Bin, "mcp")
	cmd.Env = append(append(os.Environ(), e.Vars...), "GORACE=atexit_sleep_ms=0")
	cmd.Dir = e.Project
	stderr, err := os.Create(filepath.Join(t.TempDir(), "spool-mcp.stderr"))
	require.NoError(t, err)
	defer stderr.Close()
	cmd.Stderr = stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-graphs", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	defer func() {
		require.NoError(t, sess.Close())
		if t.Failed() {
			b, _ := os.ReadFile(stderr.Name())
			t.Logf("spool mcp stderr:\n%s", b)
		}
	}()
	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		return res
	}
	decode := func(res *mcp.CallToolResult, v any) {
		t.Helper()
		require.False(t, res.IsError, "%s", resultText(res))
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, v))
	}
	record := func(res *mcp.CallToolResult) *registry.Record {
		t.Helper()
		var rec registry.Record
		decode(res, &rec)
		return &rec
	}

	// run_graph, waiting for the end; show_graph's node table.
	done := record(call("run_graph", map[string]any{"graph": "g/review", "inputs": map[string]any{"topics": []string{"a", "b"}}, "wait": true}))
	require.Equal(t, registry.KindGraph, done.Kind)
	require.Equal(t, thread.StatusCompleted, done.Status, "%+v", done.Error)
	require.Equal(t, map[string]any{"reviewed": 2.0, "failed": 0.0, "planned": 2.0}, done.Outputs)
	var run api.GraphRun
	decode(call("show_graph", map[string]any{"thread_id": done.ThreadID}), &run)
	require.Equal(t, done.ThreadID, run.Record.ThreadID)
	require.Len(t, run.Nodes, 5)
	require.Equal(t, "review", run.Nodes[1].Node)
	require.Equal(t, graph.NodeCompleted, run.Nodes[1].Status)
	require.Equal(t, "2/2 done", run.Nodes[1].Children)
	require.Len(t, run.Steps, 3)

	// wait_thread and cancel_thread take a run's id.
	gate, _ := gateFile(t)
	held := record(call("run_graph", map[string]any{"graph": "g/hold", "inputs": map[string]any{"items": []string{"a", "b"}, "gate": gate}}))
	waitRecord(t, e, held.ThreadID, "waits on its children", holding)
	res := call("wait_thread", map[string]any{"thread_id": held.ThreadID, "timeout": 0.3})
	require.True(t, res.IsError)
	require.Contains(t, resultText(res), "it is waiting")
	res = call("cancel_thread", map[string]any{"thread_id": held.ThreadID})
	require.False(t, res.IsError, "%s", resultText(res))
	final := record(call("wait_thread", map[string]any{"thread_id": held.ThreadID, "timeout": 60}))
	require.Equal(t, thread.StatusCancelled, final.Status)
	kids, err := e.Orch.Children(ctx, held.ThreadID)
	require.NoError(t, err)
	require.Len(t, kids, 2)
	for _, k := range kids {
		waitRecord(t, e, k.ThreadID, "cancelled with the run", func(r *registry.Record) bool { return r.Status == thread.StatusCancelled })
	}

	// approve_call decides an approval node.
	gated := record(call("run_graph", map[string]any{"graph": "g/review", "inputs": map[string]any{"topics": []string{"x"}, "sign_off": true}}))
	waitRecord(t, e, gated.ThreadID, "waits for approval", func(r *registry.Record) bool { return r.WaitingFor == registry.WaitingForApproval })
	res = call("approve_call", map[string]any{"thread_id": gated.ThreadID, "reason": "ship it"})
	require.False(t, res.IsError, "%s", resultText(res))
	final = record(call("wait_thread", map[string]any{"thread_id": gated.ThreadID, "timeout": 60}))
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, 1.0, final.Outputs["reviewed"])

	// What cannot be done is a tool error that says why.
	for _, c := range []struct {
		tool string
		args map[string]any
		want string
	}{
		{"run_graph", map[string]any{"graph": "g/nope"}, "g/nope"},
		{"run_graph", map[string]any{}, `missing properties: ["graph"]`},
		{"run_graph", map[string]any{"graph": "g/review", "inputs": map[string]any{"topics": "one"}}, "topics"},
		{"show_graph", map[string]any{"thread_id": "g/nope-1-aa"}, "not found"},
		{"show_graph", map[string]any{"thread_id": kids[0].ThreadID}, "is a thread, not a graph run"},
	} {
		res := call(c.tool, c.args)
		require.True(t, res.IsError, "%s %v: %s", c.tool, c.args, resultText(res))
		require.Contains(t, resultText(res), c.want)
	}
}
