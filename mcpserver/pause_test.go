package mcpserver_test

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/mcpserver"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestMain checks for leaked goroutines once the tests have run and the
// test Redis has stopped.
func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

// holdDirective is t/hold, which no worker runs here: its threads stay
// created, so a pause is requested and taken at their first boundary.
const holdDirective = "# Hold\n\n```xml\n<directive name=\"hold\" version=\"1.0.0\">\n  <metadata>\n" +
	"    <description>Hold</description>\n    <model tier=\"fast\" />\n    <limits turns=\"3\" spend=\"0.1\" />\n" +
	"    <permissions><execute><tool>rye/file-system/*</tool></execute></permissions>\n  </metadata>\n</directive>\n```\n"

// pauseEnv is an orchestrator over the test Redis with t/hold in its
// bundle, and no worker.
type pauseEnv struct {
	orch    *orchestrator.Orchestrator
	bundle  string
	project string
}

func newPauseEnv(t *testing.T) *pauseEnv {
	t.Helper()
	r := testenv.NewRedis(t)
	store := blobstore.NewMemory()
	dir := t.TempDir()
	testenv.WriteFiles(t, dir, map[string]string{".ai/directives/t/hold.md": holdDirective})
	bundle, err := directive.BuildBundle(t.Context(), store, dir, "", nil)
	require.NoError(t, err)
	signer, err := transcript.GenerateKey()
	require.NoError(t, err)
	aq := asynq.NewClientFromRedisClient(r.Client)
	t.Cleanup(func() { _ = aq.Close() })
	o, err := orchestrator.New(orchestrator.Config{Namespace: r.Namespace, Logger: slog.New(slog.DiscardHandler)}, r.Client, store,
		&queue.Enqueuer{Client: aq}, signer, transcript.NewKeyring(signer.PublicKey()))
	require.NoError(t, err)
	return &pauseEnv{orch: o, bundle: bundle, project: dir}
}

func (e *pauseEnv) start(t *testing.T, tenant, parent string) *spooltype.Record {
	t.Helper()
	rec, err := e.orch.Start(t.Context(), orchestrator.StartRequest{Directive: "t/hold", Inputs: map[string]any{}, Bundle: e.bundle,
		Tenant: tenant, ParentID: parent})
	require.NoError(t, err)
	return rec
}

// connect serves the tools (bound to tenant, unless "") in memory and
// returns a client session of them.
func (e *pauseEnv) connect(t *testing.T, tenant string) *mcp.ClientSession {
	t.Helper()
	ctx := t.Context()
	srv, err := mcpserver.New(mcpserver.Config{Orch: e.orch, Project: e.project, Tenant: tenant})
	require.NoError(t, err)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// callTool calls a tool; a tool error is its text, else the result's
// structured content decodes into out (when not nil).
func callTool(t *testing.T, cs *mcp.ClientSession, name string, args map[string]any, out any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: name, Arguments: args})
	require.NoError(t, err, name)
	if res.IsError {
		require.Len(t, res.Content, 1, name)
		return res.Content[0].(*mcp.TextContent).Text
	}
	if out != nil {
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, out), name)
	}
	return ""
}

// TestPauseTools: pause_thread and unpause_thread pause and let go a run
// and its descendants (tree: the whole tree, from its root), saying what
// they did; a server bound to a tenant answers another tenant's run
// exactly as an id that does not exist, and pauses nothing of it; a run
// that has ended is refused; list_threads filters by status paused.
func TestPauseTools(t *testing.T) {
	t.Parallel()
	e := newPauseEnv(t)
	ctx := t.Context()
	root := e.start(t, "acme", "")
	child := e.start(t, "acme", root.ThreadID)
	beta := e.start(t, "beta", "")
	acme := e.connect(t, "acme")
	requested := func(id string) bool {
		t.Helper()
		rec, err := e.orch.Record(ctx, id)
		require.NoError(t, err)
		return rec.PauseRequested
	}

	tools := map[string]*mcp.Tool{}
	for tl, err := range acme.Tools(ctx, nil) {
		require.NoError(t, err)
		tools[tl.Name] = tl
	}
	for _, name := range []string{"pause_thread", "unpause_thread"} {
		require.Contains(t, tools, name)
		b, err := json.Marshal(tools[name].InputSchema)
		require.NoError(t, err)
		require.Contains(t, string(b), `"thread_id"`)
		require.Contains(t, string(b), `"tree"`)
	}

	var res spooltype.PauseResult
	require.Empty(t, callTool(t, acme, "pause_thread", map[string]any{"thread_id": child.ThreadID}, &res))
	require.Equal(t, spooltype.PauseResult{Success: true, ThreadID: child.ThreadID, Status: thread.StatusCreated, PauseRequested: true, Runs: 1}, res)
	require.True(t, requested(child.ThreadID))
	require.False(t, requested(root.ThreadID), "not its parent")

	require.Empty(t, callTool(t, acme, "pause_thread", map[string]any{"thread_id": child.ThreadID, "tree": true}, &res))
	require.Equal(t, root.ThreadID, res.ThreadID, "tree: from the root")
	require.Equal(t, 2, res.Runs)
	require.True(t, requested(root.ThreadID))

	res = spooltype.PauseResult{}
	require.Empty(t, callTool(t, acme, "unpause_thread", map[string]any{"thread_id": root.ThreadID}, &res))
	require.Equal(t, root.ThreadID, res.ThreadID)
	require.Equal(t, thread.StatusCreated, res.Status)
	require.False(t, res.PauseRequested)
	require.Equal(t, 2, res.Runs)
	require.False(t, requested(root.ThreadID))
	require.False(t, requested(child.ThreadID))

	var page struct {
		Threads []spooltype.Record `json:"threads"`
	}
	require.Empty(t, callTool(t, acme, "list_threads", map[string]any{"status": "paused"}, &page), "paused is a status to list by")

	// Another tenant's run: as an id that does not exist.
	missing := beta.ThreadID[:len(beta.ThreadID)-4] + "zzzz"
	for _, name := range []string{"pause_thread", "unpause_thread"} {
		got := callTool(t, acme, name, map[string]any{"thread_id": beta.ThreadID, "tree": true}, nil)
		want := callTool(t, acme, name, map[string]any{"thread_id": missing, "tree": true}, nil)
		require.Equal(t, `thread "`+missing+`" not found`, want, name)
		require.Equal(t, strings.ReplaceAll(want, missing, beta.ThreadID), got, name)
	}
	require.False(t, requested(beta.ThreadID))
	require.Empty(t, callTool(t, e.connect(t, ""), "pause_thread", map[string]any{"thread_id": beta.ThreadID}, &res), "an unbound server's")
	require.True(t, requested(beta.ThreadID))

	require.Equal(t, "thread_id is required", callTool(t, acme, "pause_thread", map[string]any{"thread_id": " "}, nil))

	// A run that has ended.
	_, err := e.orch.CancelChain(ctx, child.ThreadID, true)
	require.NoError(t, err)
	for _, name := range []string{"pause_thread", "unpause_thread"} {
		text := callTool(t, acme, name, map[string]any{"thread_id": child.ThreadID}, nil)
		require.Contains(t, text, "run_ended", name)
		require.Contains(t, text, child.ThreadID+" has ended (cancelled)", name)
	}
}
