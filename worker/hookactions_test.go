package worker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/tools"
)

// hookActionsOf is the hook actions of a thread holding capabilities: a
// project bundle with two knowledge items, and a tool runner with the echo
// tool t/echo.
func hookActionsOf(t *testing.T, capabilities ...string) *hookActions {
	t.Helper()
	dir := t.TempDir()
	testenv.WriteFiles(t, dir, map[string]string{
		".ai/knowledge/notes/blue.md": "BLUE NOTES",
		".ai/knowledge/notes/red.md":  "RED NOTES",
	})
	store := blobstore.NewMemory()
	digest, err := directive.BuildBundle(t.Context(), store, dir, "", nil)
	require.NoError(t, err)
	b, err := directive.LoadBundle(t.Context(), store, digest)
	require.NoError(t, err)
	rec := &registry.Record{ThreadID: "t/x-1", Capabilities: capabilities}
	runner := newToolRunner(rec, nil, store, &Config{})
	runner.tools, err = tools.NewRegistry(&echoTool{name: "t/echo"})
	require.NoError(t, err)
	return &hookActions{capabilities: rec.Capabilities, dropped: rec.DroppedCapabilities,
		proj: &orchestrator.Project{Digest: digest, Bundle: b}, tools: runner}
}

// TestHookActionsHeldToCapabilities: a hook's load, search and execute
// need the thread's capabilities, as its model's tool calls do (fail
// closed: none held, nothing allowed).
func TestHookActionsHeldToCapabilities(t *testing.T) {
	t.Parallel()

	t.Run("load", func(t *testing.T) {
		t.Parallel()
		_, err := hookActionsOf(t).Load(t.Context(), "knowledge", "notes/blue")
		require.EqualError(t, err, "load knowledge notes/blue: capability rye.load.knowledge.notes.blue not held")
		_, err = hookActionsOf(t, "rye.execute.tool.*").Load(t.Context(), "knowledge", "notes/blue")
		require.Error(t, err, "execute capabilities do not allow a load")
		text, err := hookActionsOf(t, "rye.load.knowledge.notes.*").Load(t.Context(), "knowledge", "notes/blue")
		require.NoError(t, err)
		require.Equal(t, "BLUE NOTES", text)
		// execute on a knowledge item is a load, and needs the same.
		_, err = hookActionsOf(t).Execute(t.Context(), "knowledge", "notes/blue", nil)
		require.ErrorContains(t, err, "capability rye.load.knowledge.notes.blue not held")
	})

	t.Run("search", func(t *testing.T) {
		t.Parallel()
		_, err := hookActionsOf(t).Search(t.Context(), "knowledge", "notes")
		require.EqualError(t, err, `search knowledge "notes": capability rye.search.knowledge.notes.blue not held`)
		hits, err := hookActionsOf(t, "rye.search.knowledge.notes.red").Search(t.Context(), "knowledge", "notes")
		require.NoError(t, err)
		require.Equal(t, ".ai/knowledge/notes/red.md", hits, "only what the thread may search")
		hits, err = hookActionsOf(t, "rye.search.*").Search(t.Context(), "knowledge", "notes")
		require.NoError(t, err)
		require.Equal(t, ".ai/knowledge/notes/blue.md\n.ai/knowledge/notes/red.md", hits)
		hits, err = hookActionsOf(t).Search(t.Context(), "knowledge", "nothing-matches")
		require.NoError(t, err)
		require.Empty(t, hits)
	})

	t.Run("execute", func(t *testing.T) {
		t.Parallel()
		// Thread tools get no exemption: a project tool under
		// rye/agent/threads/ is refused before it is looked up.
		for _, caps := range [][]string{nil, {"rye.execute.tool.rye.file-system.*"}} {
			_, err := hookActionsOf(t, caps...).Execute(t.Context(), "tool", "rye/agent/threads/thread_summary", map[string]any{"thread_id": "t/x-1"})
			require.EqualError(t, err, "hook tool rye/agent/threads/thread_summary: permission denied: calling rye/agent/threads/thread_summary needs capability rye.execute.tool.rye.agent.threads.thread_summary, which this thread does not hold")
		}
		out, err := hookActionsOf(t, "rye.execute.tool.t.*").Execute(t.Context(), "tool", "t.echo", map[string]any{"a": 1})
		require.NoError(t, err)
		require.JSONEq(t, `{"a":1}`, out, "a tool the thread holds runs")
		_, err = hookActionsOf(t, "rye.execute.tool.t.*").Execute(t.Context(), "tool", "t/none", nil)
		require.EqualError(t, err, "hook tool t/none: unknown tool")
	})
}
