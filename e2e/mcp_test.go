package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// The MCP tests run the reference MCP server nobody here wrote,
// @modelcontextprotocol/server-everything from npm (testenv.MCPEverything),
// over stdio and streamable HTTP, and, behind a small pipe that kills it
// in the middle of a call (testdata/mcp/crashy.mjs), as a server that
// crashes.

func mcpDirective(name, perms string) string {
	return directive(name, `turns="6"`, "<execute>"+perms+"</execute>", `<success>done</success>`)
}

// startEverythingHTTP runs the reference server's streamable HTTP mode on
// a free port until the test ends, and returns its address.
func startEverythingHTTP(t *testing.T, srv *testenv.MCPServer) string {
	t.Helper()
	port, err := testenv.FreePort()
	require.NoError(t, err)
	cmd := exec.Command(srv.Node, srv.Entry, "streamableHttp")
	cmd.Env = append(os.Environ(), fmt.Sprintf("PORT=%d", port))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("everything (streamable HTTP):\n%s", out.String())
		}
	})
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	require.Eventually(t, func() bool {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "the HTTP server listens")
	return addr
}

// toolResults are the tool_call_result events of thread id's transcript.
func toolResults(t *testing.T, e *spooltest.Env, id string) []transcript.ToolCallResult {
	t.Helper()
	rec, err := e.Orch.Record(context.Background(), id)
	require.NoError(t, err)
	tr, err := e.Orch.ReadTranscript(context.Background(), rec)
	require.NoError(t, err)
	return payloads[transcript.ToolCallResult](t, tr.Events, transcript.TypeToolCallResult)
}

// TestMCPClientEndToEnd gives threads the tools of real MCP servers on a
// real worker: the reference server over stdio (text, a sum, an image
// kept as an artifact, structured content; only the tools the directive
// may call are offered, and a call past its capabilities is refused),
// shared by two threads; the same server over streamable HTTP, reached
// through a proxy that sees the header mcp.yaml names, expanded from the
// worker's environment; and a stdio server killed in the middle of a
// call: that call is the model's error, the next call starts the server
// again, and the thread completes.
func TestMCPClientEndToEnd(t *testing.T) {
	t.Parallel()
	srv := testenv.MCPEverything(t)
	crashy, err := filepath.Abs("testdata/mcp/crashy.mjs")
	require.NoError(t, err)

	// The HTTP server behind a proxy that records what it is sent.
	target := startEverythingHTTP(t, srv)
	var mu sync.Mutex
	var auth []string
	proxy := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: target})
	proxy.FlushInterval = -1
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth = append(auth, r.Header.Get("Authorization"))
		mu.Unlock()
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)

	starts := filepath.Join(t.TempDir(), "crashy-starts")
	mcpYAML := fmt.Sprintf(`servers:
  everything:
    command: [%q, %q]
    timeout: 30s
  crashy:
    command: [%q, %q, %q, %q]
    timeout: 60s
  remote:
    url: "http://${MCP_REMOTE_ADDR}/mcp"
    headers: {Authorization: "Bearer ${MCP_REMOTE_TOKEN}"}
`, srv.Node, srv.Entry, srv.Node, crashy, srv.Entry, starts)
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/m/everything.md": mcpDirective("everything",
			`<tool>mcp/everything/echo</tool><tool>mcp/everything/get-sum</tool><tool>mcp/everything/get-tiny-image</tool><tool>mcp/everything/get-structured-content</tool>`),
		".ai/directives/m/crash.md":  mcpDirective("crash", `<tool>mcp/crashy/*</tool>`),
		".ai/directives/m/remote.md": mcpDirective("remote", `<tool>mcp/remote/*</tool>`),
		".ai/config/mcp.yaml":        mcpYAML,
		"scripts/m.yaml":             script("mcp"),
	}})
	w := e.Start([]string{"MCP_REMOTE_ADDR=" + strings.TrimPrefix(front.URL, "http://"), "MCP_REMOTE_TOKEN=tok-e2e"}, "worker", "--concurrency", "4")
	model := []string{"--model", "script:scripts/m.yaml"}

	ids := map[string]string{}
	for _, d := range []string{"m/everything", "m/crash", "m/remote"} {
		ids[d] = startThread(t, e, append([]string{d}, model...)...)
	}
	second := startThread(t, e, append([]string{"m/everything"}, model...)...)
	all := []string{ids["m/everything"], ids["m/crash"], ids["m/remote"], second}
	start := time.Now()
	final := e.Wait(all, 3*time.Minute)
	for _, id := range all {
		require.Equal(t, thread.StatusCompleted, final[id].Status, "%s: %+v", id, final[id].Error)
	}

	t.Run("stdio", func(t *testing.T) {
		for _, id := range []string{ids["m/everything"], second} {
			var got struct {
				Tools   []string `json:"tools"`
				Results []string `json:"results"`
			}
			require.NoError(t, json.Unmarshal([]byte(final[id].Result), &got), final[id].Result)
			require.Equal(t, []string{"mcp/everything/echo", "mcp/everything/get-structured-content", "mcp/everything/get-sum",
				"mcp/everything/get-tiny-image", "rye/agent/threads/directive_return"}, got.Tools,
				"the model is offered the MCP tools the directive may call, and no other")
			require.Len(t, got.Results, 5)
			require.Equal(t, "Echo: hello from spool", got.Results[0])
			require.Contains(t, got.Results[1], "42")
			require.Regexp(t, `\[image image/png, \d+ bytes, kept as artifact threads/[^ ]+/artifacts/mcp-[0-9a-f]{32}\.png\]`, got.Results[2])
			key := got.Results[2][strings.Index(got.Results[2], "threads/"):strings.LastIndex(got.Results[2], "]")]
			png, err := e.Store.Get(context.Background(), key)
			require.NoError(t, err)
			require.True(t, bytes.HasPrefix(png, []byte("\x89PNG")), "the artifact is the image")
			require.JSONEq(t, `{"temperature":36,"conditions":"Light rain / drizzle","humidity":82}`, got.Results[3],
				"structured content, said once")
			require.Contains(t, got.Results[4], "permission denied: calling mcp/everything/get-env needs capability rye.execute.tool.mcp.everything.get-env")
		}
		require.Equal(t, 1, strings.Count(w.Log(), `msg="mcp server connected" server=everything`),
			"one process for both threads:\n%s", w.Log())
	})

	t.Run("streamable HTTP", func(t *testing.T) {
		var got []string
		require.NoError(t, json.Unmarshal([]byte(final[ids["m/remote"]].Result), &got))
		require.Len(t, got, 2)
		require.Equal(t, "Echo: over http", got[0])
		require.Contains(t, got[1], "3")
		mu.Lock()
		defer mu.Unlock()
		require.NotEmpty(t, auth)
		for _, a := range auth {
			require.Equal(t, "Bearer tok-e2e", a, "every request carries the header, ${VAR} expanded from the worker's environment")
		}
	})

	t.Run("crash mid-call", func(t *testing.T) {
		res := toolResults(t, e, ids["m/crash"])
		require.Len(t, res, 3)
		require.Equal(t, "Echo: before", res[0].Output)
		require.False(t, res[0].IsError)
		require.True(t, res[1].IsError, "the call the crash cut short is the model's error: %s", res[1].Output)
		require.Contains(t, res[1].Output, "MCP server crashy exited during the call")
		require.Contains(t, res[1].Output, "crashy: killing the server in the middle of a call", "the end of its stderr")
		require.Equal(t, "Echo: after", res[2].Output, "the next call started the server again")
		require.False(t, res[2].IsError)
		b, err := os.ReadFile(starts)
		require.NoError(t, err)
		require.Len(t, strings.Fields(string(b)), 2, "started twice: once, and again after the crash")
		require.Less(t, time.Since(start), 30*time.Second, "the crashed call did not wait for its 30 s operation")
	})
}

// TestSpoolMCPServer drives `spool mcp` with the official Go SDK's client
// over stdio, as a coding assistant would: it lists the tools, runs a
// thread and waits for it, runs one whose MCP tool call approvals.yaml
// gates and approves it, denies another's, pauses, unpauses and cancels
// a third, reads a transcript, and gets tool errors for what cannot be
// done.
func TestSpoolMCPServer(t *testing.T) {
	t.Parallel()
	srv := testenv.MCPEverything(t)
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/m/gated.md":       mcpDirective("gated", `<tool>mcp/everything/*</tool>`),
		".ai/directives/m/hello.md":       mcpDirective("hello", ``),
		".ai/config/mcp.yaml":             fmt.Sprintf("servers:\n  everything:\n    command: [%q, %q]\n", srv.Node, srv.Entry),
		".ai/config/agent/approvals.yaml": "approvals:\n  - tool: mcp/everything/echo\n",
		"scripts/m.yaml":                  script("mcp"),
	}})
	e.StartWorker("--concurrency", "2")

	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.Command(e.Bin, "mcp")
	cmd.Env = append(append(os.Environ(), e.Vars...), "GORACE=atexit_sleep_ms=0")
	cmd.Dir = e.Project
	stderr, err := os.Create(filepath.Join(t.TempDir(), "spool-mcp.stderr"))
	require.NoError(t, err)
	defer stderr.Close()
	cmd.Stderr = stderr
	logStderr := func() {
		b, _ := os.ReadFile(stderr.Name())
		t.Logf("spool mcp stderr:\n%s", b)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "e2e-assistant", Version: "1"}, nil)
	sess, err := client.Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		logStderr()
		t.Fatal(err)
	}
	defer func() {
		require.NoError(t, sess.Close(), "spool mcp exits 0 when the client leaves")
		if t.Failed() {
			logStderr()
		}
	}()

	var names []string
	for tl, err := range sess.Tools(ctx, nil) {
		require.NoError(t, err)
		names = append(names, tl.Name)
	}
	require.ElementsMatch(t, []string{"run_thread", "show_thread", "wait_thread", "cancel_thread", "pause_thread", "unpause_thread",
		"approve_call", "deny_call", "read_transcript", "run_graph", "show_graph", "send_graph_message", "show_tenant", "list_threads",
		"bulk_action", "show_bulk"}, names)

	call := func(name string, args map[string]any) *mcp.CallToolResult {
		t.Helper()
		res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		require.NoError(t, err)
		return res
	}
	record := func(res *mcp.CallToolResult) *registry.Record {
		t.Helper()
		require.False(t, res.IsError, "%s", resultText(res))
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		var rec registry.Record
		require.NoError(t, json.Unmarshal(b, &rec))
		require.NotEmpty(t, rec.ThreadID)
		return &rec
	}
	toolError := func(res *mcp.CallToolResult, want string) {
		t.Helper()
		require.True(t, res.IsError, "%s", resultText(res))
		require.Contains(t, resultText(res), want)
	}

	// run_thread, waiting for the end.
	done := record(call("run_thread", map[string]any{"directive": "m/hello", "model": "script:scripts/m.yaml", "wait": true}))
	require.Equal(t, thread.StatusCompleted, done.Status)
	require.Equal(t, "hello", done.Result)
	require.Equal(t, done.ThreadID, record(call("show_thread", map[string]any{"thread_id": done.ThreadID})).ThreadID)

	// A gated MCP tool call waits for a person; approve_call lets it run.
	waiting := func(word string) string {
		t.Helper()
		rec := record(call("run_thread", map[string]any{"directive": "m/gated", "inputs": map[string]any{"word": word}, "model": "script:scripts/m.yaml"}))
		require.Eventually(t, func() bool {
			r := record(call("show_thread", map[string]any{"thread_id": rec.ThreadID}))
			return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForApproval
		}, time.Minute, 100*time.Millisecond)
		return rec.ThreadID
	}
	a := waiting("approved")
	toolError(call("wait_thread", map[string]any{"thread_id": a, "timeout": 0.3}), "has not ended after 300ms: it is waiting")
	approved := call("approve_call", map[string]any{"thread_id": a})
	require.False(t, approved.IsError, "%s", resultText(approved))
	require.Contains(t, resultText(approved), `"by":"mcp:e2e-assistant"`, "recorded as the client that decided")
	final := record(call("wait_thread", map[string]any{"thread_id": a, "timeout": 60}))
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, "after: Echo: approved", final.Result)
	tr := call("read_transcript", map[string]any{"thread_id": a})
	require.False(t, tr.IsError, "%s", resultText(tr))
	require.Contains(t, resultText(tr), "mcp/everything/echo")
	require.Contains(t, resultText(tr), "Echo: approved")
	cut := call("read_transcript", map[string]any{"thread_id": a, "format": "text", "max_bytes": 100})
	require.Contains(t, resultText(cut), "bytes are left out; max_bytes=100")

	// deny_call needs a reason, which the model gets.
	d := waiting("denied")
	toolError(call("deny_call", map[string]any{"thread_id": d}), "reason is required")
	require.False(t, call("deny_call", map[string]any{"thread_id": d, "reason": "not today", "by": "ada"}).IsError)
	final = record(call("wait_thread", map[string]any{"thread_id": d}))
	require.Equal(t, thread.StatusCompleted, final.Status)
	require.Contains(t, final.Result, "not today")
	require.NotContains(t, final.Result, "Echo: denied", "a denied call never runs")

	// pause_thread pauses a waiting thread at once; unpause_thread lets
	// it wait for its decision again.
	c := waiting("cancelled")
	pres := call("pause_thread", map[string]any{"thread_id": c})
	require.False(t, pres.IsError, "%s", resultText(pres))
	require.Contains(t, resultText(pres), `"status":"paused"`)
	require.Contains(t, resultText(pres), `"paused":1`)
	paused := record(call("show_thread", map[string]any{"thread_id": c}))
	require.Equal(t, thread.StatusPaused, paused.Status)
	require.True(t, paused.PauseRequested)
	pres = call("unpause_thread", map[string]any{"thread_id": c, "tree": true})
	require.False(t, pres.IsError, "%s", resultText(pres))
	require.Contains(t, resultText(pres), `"pause_requested":false`)
	unpaused := record(call("show_thread", map[string]any{"thread_id": c}))
	require.Equal(t, thread.StatusWaiting, unpaused.Status)
	require.Equal(t, registry.WaitingForApproval, unpaused.WaitingFor)

	// cancel_thread ends a waiting thread.
	cres := call("cancel_thread", map[string]any{"thread_id": c})
	require.False(t, cres.IsError, "%s", resultText(cres))
	require.Contains(t, resultText(cres), `"cancel_requested":true`)
	final = record(call("wait_thread", map[string]any{"thread_id": c, "timeout": 60}))
	require.Equal(t, thread.StatusCancelled, final.Status)

	// list_threads finds them by status and directive, a page at a time.
	list := func(args map[string]any) (ids []string, next string) {
		t.Helper()
		res := call("list_threads", args)
		require.False(t, res.IsError, "%s", resultText(res))
		var page struct {
			Threads []registry.Record `json:"threads"`
			Next    string            `json:"next_cursor"`
		}
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &page))
		for _, r := range page.Threads {
			ids = append(ids, r.ThreadID)
		}
		return ids, page.Next
	}
	ids, next := list(map[string]any{"directive": "m/gated", "status": "completed"})
	require.ElementsMatch(t, []string{a, d}, ids)
	require.Empty(t, next)
	first, next := list(map[string]any{"directive": "m/gated", "limit": 1})
	require.Len(t, first, 1)
	require.Equal(t, c, first[0], "newest first")
	require.NotEmpty(t, next)
	rest, _ := list(map[string]any{"directive": "m/gated", "limit": 10, "cursor": next})
	require.ElementsMatch(t, []string{a, d}, rest, "the next page goes on after the cursor")
	ids, _ = list(map[string]any{"status": "cancelled", "kind": "thread"})
	require.Equal(t, []string{c}, ids)
	toolError(call("list_threads", map[string]any{"status": "done"}), `status "done"`)
	toolError(call("pause_thread", map[string]any{"thread_id": c}), "has ended (cancelled)")
	toolError(call("list_threads", map[string]any{"kind": "job"}), `kind "job"`)

	// bulk_action approves every waiting run a filter selects, as an
	// operation show_bulk follows; a dry run counts first.
	b1, b2 := waiting("approved"), waiting("approved")
	structured := func(res *mcp.CallToolResult, v any) {
		t.Helper()
		require.False(t, res.IsError, "%s", resultText(res))
		b, err := json.Marshal(res.StructuredContent)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, v))
	}
	var bulk struct {
		Operation string `json:"operation"`
		Matched   int64  `json:"matched"`
	}
	structured(call("bulk_action", map[string]any{"action": "approve", "directive": "m/gated", "status": "waiting", "dry_run": true}), &bulk)
	require.Equal(t, int64(2), bulk.Matched)
	require.Empty(t, bulk.Operation, "a dry run makes no operation")
	structured(call("bulk_action", map[string]any{"action": "approve", "directive": "m/gated", "status": "waiting", "reason": "batch"}), &bulk)
	require.Equal(t, int64(2), bulk.Matched)
	require.NotEmpty(t, bulk.Operation)
	require.Eventually(t, func() bool {
		var op struct {
			Status string `json:"status"`
			Done   int64  `json:"done"`
		}
		structured(call("show_bulk", map[string]any{"operation": bulk.Operation}), &op)
		return op.Status == "completed" && op.Done == 2
	}, time.Minute, 100*time.Millisecond)
	for _, id := range []string{b1, b2} {
		final = record(call("wait_thread", map[string]any{"thread_id": id, "timeout": 60}))
		require.Equal(t, thread.StatusCompleted, final.Status)
		require.Equal(t, "after: Echo: approved", final.Result)
	}
	toolError(call("bulk_action", map[string]any{"action": "delete"}), "delete")
	toolError(call("show_bulk", map[string]any{"operation": "bulk-20261203T000000-0123abcd"}), "not found")

	// What cannot be done is a tool error that says why.
	toolError(call("show_thread", map[string]any{"thread_id": "m/nope-1-aa"}), `thread "m/nope-1-aa" not found`)
	toolError(call("run_thread", map[string]any{"directive": "m/missing", "model": "script:scripts/m.yaml"}), "m/missing")
	toolError(call("approve_call", map[string]any{"thread_id": done.ThreadID}), "nothing pending")
	toolError(call("read_transcript", map[string]any{"thread_id": done.ThreadID, "format": "pdf"}), `format "pdf"`)
	toolError(call("show_thread", map[string]any{}), "thread_id")
}

// resultText is a tool result's text content.
func resultText(res *mcp.CallToolResult) string {
	var parts []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			parts = append(parts, tc.Text)
		}
	}
	return strings.Join(parts, "\n")
}
