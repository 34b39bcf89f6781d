package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/worker"
)

// hookInbox is an approval webhook receiver: every delivery, by thread.
type hookInbox struct {
	mu   sync.Mutex
	msgs map[string][]worker.ApprovalWebhook
	// answer, when set, runs inside the delivery before it is answered
	// 200: a bot that decides at once.
	answer func(worker.ApprovalWebhook)
}

func newHookInbox(t *testing.T, answer func(worker.ApprovalWebhook)) (*hookInbox, *httptest.Server) {
	in := &hookInbox{msgs: map[string][]worker.ApprovalWebhook{}, answer: answer}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m worker.ApprovalWebhook
		if err := json.Unmarshal(b, &m); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if in.answer != nil {
			in.answer(m)
		}
		in.mu.Lock()
		in.msgs[m.ThreadID] = append(in.msgs[m.ThreadID], m)
		in.mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	return in, srv
}

// wait returns the first delivery for thread id.
func (in *hookInbox) wait(t *testing.T, id string) worker.ApprovalWebhook {
	t.Helper()
	var m worker.ApprovalWebhook
	require.Eventually(t, func() bool {
		in.mu.Lock()
		defer in.mu.Unlock()
		if len(in.msgs[id]) == 0 {
			return false
		}
		m = in.msgs[id][0]
		return true
	}, time.Minute, 20*time.Millisecond, "no webhook for %s", id)
	return m
}

// webhookEnv is the people project with the approval webhook at hook and
// decision links under `spool api`, which it starts, and a worker.
func webhookEnv(t *testing.T, hook string) (*spooltest.Env, *apiProc) {
	t.Helper()
	files := peopleProject()
	files[".ai/config/agent/approvals.yaml"] = peopleApprovals +
		"notify:\n  url: ${SPOOL_TEST_HOOK_URL}\n  secret: a-webhook-secret\n  links: ${SPOOL_TEST_LINKS}\n"
	e := spooltest.New(t, spooltest.Options{Files: files})
	srv := startAPI(t, e)
	e.Start([]string{"SPOOL_TEST_HOOK_URL=" + hook, "SPOOL_TEST_LINKS=" + srv.base}, "worker", "--concurrency", "4")
	return e, srv
}

// postLink POSTs a decision link (a JSON body with reason) and returns
// the status and body.
func postLink(t *testing.T, link, reason string) (int, string) {
	t.Helper()
	body := "{}"
	if reason != "" {
		body = fmt.Sprintf(`{"reason":%q}`, reason)
	}
	resp, err := http.Post(link, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// mcpCall calls tool of a `spool mcp` session of its own.
func mcpCall(t *testing.T, e *spooltest.Env, tool string, args map[string]any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(e.Bin, "mcp")
	cmd.Env = append(append(os.Environ(), e.Vars...), "GORACE=atexit_sleep_ms=0")
	cmd.Dir = e.Project
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "e2e-bot", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err)
	defer sess.Close()
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	return res
}

// TestDecisionBindsToItsCall: call ids repeat across a continuation chain
// (call_1_1 in A and again in A's resume B), and a decision made for A's
// call never lands on B's. A's unused approve link, `thread approve A
// --call call_1_1`, the API's approve of A's call and an approve of B's
// call with A's request id are all refused, B's call still waits; B's
// own link decides it, and neither call ever ran. The same from MCP.
func TestDecisionBindsToItsCall(t *testing.T) {
	t.Parallel()
	in, hook := newHookInbox(t, nil)
	e, srv := webhookEnv(t, hook.URL)
	model := []string{"--model", "script:scripts/p.yaml"}

	a := startThread(t, e, append([]string{"p/write"}, model...)...)
	ma := in.wait(t, a)
	require.Equal(t, "call_1_1", ma.CallID)
	require.NotEmpty(t, ma.RequestID)
	waitForApproval(t, e, a)
	// A's call is denied at the CLI: its approve link stays unused.
	d := e.Spool("thread", "deny", a, "--call", "call_1_1", "--reason", "not this one")
	require.Equal(t, 0, d.Code, d.Stderr)
	require.Equal(t, thread.StatusCompleted, e.Wait([]string{a}, time.Minute)[a].Status)

	res := spoolJSON[orchestrator.ResumeResult](t, e, "thread", "resume", a, "--message", "write it after all", "--json")
	b := res.NewThreadID
	mb := in.wait(t, b)
	require.Equal(t, "call_1_1", mb.CallID, "the same call id in the continuation")
	require.NotEqual(t, ma.RequestID, mb.RequestID)
	waitForApproval(t, e, b)

	// Every way of deciding A's call leaves B's alone.
	status, body := postLink(t, ma.ApproveURL, "")
	require.Equal(t, http.StatusConflict, status, "A's unused link: %s", body)
	get, err := http.Get(ma.ApproveURL)
	require.NoError(t, err)
	get.Body.Close()
	require.Equal(t, http.StatusConflict, get.StatusCode, "A's link shows no call")
	cli := e.Spool("thread", "approve", a, "--call", "call_1_1")
	require.Equal(t, 1, cli.Code, "approve --call names A's call, which waits for nothing: %s", cli.Stdout)
	raw := apiCall{t: t, hc: &http.Client{Transport: newOpenAPITransport(t)}, base: srv.base}
	raw.problem(http.StatusConflict, "not_pending", http.MethodPost, "/v1/threads/"+url.PathEscape(a)+"/approve", `{"call_id":"call_1_1"}`)
	raw.problem(http.StatusConflict, "not_pending", http.MethodPost, "/v1/threads/"+url.PathEscape(b)+"/approve",
		fmt.Sprintf(`{"call_id":"call_1_1","request_id":%q}`, ma.RequestID))
	for _, args := range []map[string]any{
		{"thread_id": a, "call_id": "call_1_1"},
		{"thread_id": b, "call_id": "call_1_1", "request_id": ma.RequestID},
	} {
		res := mcpCall(t, e, "approve_call", args)
		require.True(t, res.IsError, "approve_call %v: %s", args, resultText(res))
		require.Contains(t, resultText(res), "nothing pending")
	}
	pending, err := e.Orch.Approvals(context.Background(), b)
	require.NoError(t, err)
	require.Len(t, pending, 1, "B's call still waits")
	require.Equal(t, mb.RequestID, pending[0].RequestID)

	// B's own link decides B's call.
	status, body = postLink(t, mb.DenyURL, "no, really")
	require.Equal(t, http.StatusOK, status, body)
	final := e.Wait([]string{b}, time.Minute)[b]
	require.Equal(t, thread.StatusCompleted, final.Status)
	require.Contains(t, final.Result, "no, really")
	_, err = e.Store.Get(context.Background(), blobkey.WorkspaceFile(final.TreeID(), "out.txt"))
	require.Error(t, err, "neither call ran")
}

// TestApprovalWebhookAnsweredAtOnce: a bot that approves inside the
// webhook's delivery, before answering it, is never refused: the webhook
// goes out once the suspension is written, so the link always finds its
// call pending. Many threads, each approved at once, each completes
// having run its call once.
func TestApprovalWebhookAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	const threads = 12
	var mu sync.Mutex
	statuses := map[string]int{}
	bodies := map[string]string{}
	in, hook := newHookInbox(t, func(m worker.ApprovalWebhook) {
		resp, err := http.Post(m.ApproveURL, "application/json", strings.NewReader("{}"))
		code, body := 0, ""
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			code, body = resp.StatusCode, string(b)
		} else {
			body = err.Error()
		}
		mu.Lock()
		statuses[m.ThreadID], bodies[m.ThreadID] = code, body
		mu.Unlock()
	})
	e, _ := webhookEnv(t, hook.URL)
	ids := make([]string, threads)
	for i := range ids {
		ids[i] = startThread(t, e, "p/write", "--model", "script:scripts/p.yaml")
	}
	for _, id := range ids {
		in.wait(t, id)
	}
	mu.Lock()
	refused := 0
	for _, id := range ids {
		if statuses[id] != http.StatusOK {
			refused++
			t.Errorf("%s: the decision at once answered %d: %s", id, statuses[id], bodies[id])
		}
	}
	mu.Unlock()
	t.Logf("%d of %d decisions made at once refused", refused, threads)
	require.Zero(t, refused)
	final := e.Wait(ids, 2*time.Minute)
	for _, id := range ids {
		require.Equal(t, thread.StatusCompleted, final[id].Status, id)
		data, err := e.Store.Get(context.Background(), blobkey.WorkspaceFile(final[id].TreeID(), "out.txt"))
		require.NoError(t, err, id)
		require.Equal(t, "once", string(data), "%s: the approved call ran once", id)
	}
}
