package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/worker"
)

const peopleApprovals = `approvals:
  - tool: rye/file-system/fs_write
  - tool: rye/file-system/fs_list
    timeout: 2s
    on_timeout: deny
`

func peopleProject() map[string]string {
	return map[string]string{
		".ai/directives/p/write.md":       directive("write", `turns="4"`, fsPerms, `<success>done</success>`),
		".ai/directives/p/two.md":         directive("two", `turns="4"`, fsPerms, `<success>done</success>`),
		".ai/directives/p/list.md":        directive("list", `turns="4"`, fsPerms, `<success>done</success>`),
		".ai/directives/p/free.md":        directive("free", `turns="4"`, fsPerms, `<success>done</success>`),
		".ai/config/agent/approvals.yaml": peopleApprovals,
		"scripts/p.yaml":                  script("people"),
	}
}

// waitForApproval waits until thread id waits for a decision.
func waitForApproval(t *testing.T, e *spooltest.Env, id string) *registry.Record {
	t.Helper()
	var rec *registry.Record
	require.Eventually(t, func() bool {
		r, err := e.Orch.Record(context.Background(), id)
		rec = r
		return err == nil && r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForApproval
	}, time.Minute, 20*time.Millisecond)
	return rec
}

// TestApprovalsEndToEnd runs approval-gated tool calls on real workers:
// the waiting thread holds no slot (another thread runs on the only one),
// approve runs the call once, deny gives the model the reason and never
// runs it, a timeout applies on_timeout, a worker killed during the wait
// changes nothing, a cancel ends a waiting thread, and two gated calls of
// one turn are decided separately.
func TestApprovalsEndToEnd(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: peopleProject()})
	w1 := e.StartWorker("--concurrency", "1")
	model := []string{"--model", "script:scripts/p.yaml"}

	// A gated call waits, holding no slot: a second thread runs on the
	// worker's only slot meanwhile.
	a := startThread(t, e, append([]string{"p/write"}, model...)...)
	rec := waitForApproval(t, e, a)
	require.Len(t, rec.PendingApprovals, 1)
	runCompleted(t, e, append([]string{"p/free"}, model...)...)

	calls := spoolJSON[[]map[string]any](t, e, "thread", "approvals", "--json")
	require.Len(t, calls, 1)
	requireKeys(t, calls[0], "thread_id", "call_id", "tool", "input", "requested_at")
	require.Equal(t, a, calls[0]["thread_id"])

	// A worker killed while the thread waits changes nothing.
	w1.Kill()
	e.StartWorker("--concurrency", "1")
	ap := e.Spool("thread", "approve", a, "--reason", "looks fine", "--by", "ada", "--json")
	require.Equal(t, 0, ap.Code, ap.Stderr)
	final := e.Wait([]string{a}, time.Minute)[a]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	data, err := e.Store.Get(context.Background(), blobkey.WorkspaceFile(final.TreeID(), "out.txt"))
	require.NoError(t, err)
	require.Equal(t, "once", string(data), "the approved call ran once")
	tr := e.Spool("thread", "transcript", a, "--format", "jsonl")
	require.Equal(t, 0, tr.Code, tr.Stderr)
	require.Contains(t, tr.Stdout, `"approval_requested"`)
	require.Contains(t, tr.Stdout, `"by":"ada"`)
	require.Contains(t, tr.Stdout, `"reason":"looks fine"`)
	again := e.Spool("thread", "approve", a)
	require.Equal(t, 1, again.Code, "nothing pending: exit 1")

	t.Run("deny", func(t *testing.T) {
		id := startThread(t, e, append([]string{"p/write"}, model...)...)
		waitForApproval(t, e, id)
		bad := e.Spool("thread", "deny", id)
		require.Equal(t, 2, bad.Code, "deny needs a reason")
		d := e.Spool("thread", "deny", id, "--reason", "not today")
		require.Equal(t, 0, d.Code, d.Stderr)
		rec := e.Wait([]string{id}, time.Minute)[id]
		require.Equal(t, thread.StatusCompleted, rec.Status)
		require.Contains(t, rec.Result, "not today", "the model got the reason")
		_, err := e.Store.Get(context.Background(), blobkey.WorkspaceFile(rec.TreeID(), "out.txt"))
		require.Error(t, err, "the denied call never ran")
	})

	t.Run("timeout", func(t *testing.T) {
		id := startThread(t, e, append([]string{"p/list"}, model...)...)
		waitForApproval(t, e, id)
		rec := e.Wait([]string{id}, time.Minute)[id]
		require.Equal(t, thread.StatusCompleted, rec.Status)
		require.Contains(t, rec.Result, "denied by timeout", "on_timeout: deny")
	})

	t.Run("cancel", func(t *testing.T) {
		id := startThread(t, e, append([]string{"p/write"}, model...)...)
		waitForApproval(t, e, id)
		c := e.Spool("thread", "cancel", id, "--json")
		require.Equal(t, 0, c.Code, c.Stderr)
		rec := e.Wait([]string{id}, time.Minute)[id]
		require.Equal(t, thread.StatusCancelled, rec.Status)
	})

	t.Run("two calls decided separately", func(t *testing.T) {
		id := startThread(t, e, append([]string{"p/two"}, model...)...)
		rec := waitForApproval(t, e, id)
		require.Len(t, rec.PendingApprovals, 2)
		first, second := rec.PendingApprovals[0].CallID, rec.PendingApprovals[1].CallID
		d := spoolJSON[orchestrator.DecideResult](t, e, "thread", "approve", id, "--call", first, "--json")
		require.False(t, d.Woken, "the other call still waits")
		require.Equal(t, thread.StatusWaiting, waitForApproval(t, e, id).Status)
		r2 := e.Spool("thread", "deny", id, "--call", second, "--reason", "only A")
		require.Equal(t, 0, r2.Code, r2.Stderr)
		rec = e.Wait([]string{id}, time.Minute)[id]
		require.Equal(t, thread.StatusCompleted, rec.Status)
		require.Contains(t, rec.Result, "only A")
		_, err := e.Store.Get(context.Background(), blobkey.WorkspaceFile(rec.TreeID(), "a.txt"))
		require.NoError(t, err)
		_, err = e.Store.Get(context.Background(), blobkey.WorkspaceFile(rec.TreeID(), "b.txt"))
		require.Error(t, err)
	})
}

// slowFirstServer answers the Messages API: its first request never
// answers (until the client goes away), every later one answers at once
// with a text naming the last user message it saw.
func slowFirstServer(t *testing.T) (*httptest.Server, *atomic.Int32, func() []string) {
	var n atomic.Int32
	var mu sync.Mutex
	var seen []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		if n.Add(1) == 1 {
			<-r.Context().Done()
			return
		}
		var body struct {
			Messages []struct {
				Role    string          `json:"role"`
				Content json.RawMessage `json:"content"`
			} `json:"messages"`
		}
		_ = json.Unmarshal(raw, &body)
		mu.Lock()
		for _, m := range body.Messages {
			if m.Role == "user" {
				seen = append(seen, string(m.Content))
			}
		}
		mu.Unlock()
		writeAnthropicText(w, "msg_2", 50, 3, "steered")
	}))
	t.Cleanup(srv.Close)
	return srv, &n, func() []string { mu.Lock(); defer mu.Unlock(); return append([]string(nil), seen...) }
}

// TestInterruptStopsTheCallInFlight: an interrupt stops a model call that
// would not answer for the whole test within about a second, on whatever
// worker runs the thread; the message reaches the next call, the thread
// completes, and the interrupted call is charged nothing (its usage is
// unknown: not as the provider reported it, since it reported nothing).
func TestInterruptStopsTheCallInFlight(t *testing.T) {
	t.Parallel()
	srv, calls, seen := slowFirstServer(t)
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/p/chat.md": directive("chat", `turns="4"`, fsPerms, `<success>done</success>`),
	}})
	env := anthropicEnv(srv)
	e.Start(env, "worker", "--concurrency", "2")
	e.Start(env, "worker", "--concurrency", "2")
	id := startThread(t, e, "p/chat", "--model", "claude-sonnet-4-5")
	require.Eventually(t, func() bool { return calls.Load() >= 1 }, time.Minute, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)

	began := time.Now()
	res := e.Spool("thread", "interrupt", id, "--message", "change of plan: just say steered", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	rec := e.Wait([]string{id}, time.Minute)[id]
	require.Less(t, time.Since(began), 10*time.Second, "the call in flight was stopped, not waited out")
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "steered", rec.Result)
	require.Equal(t, 1, rec.Cost.Turns, "the interrupted call is no turn")
	entry, err := e.Orch.LedgerEntry(context.Background(), id)
	require.NoError(t, err)
	require.InDelta(t, rec.Cost.Spend, entry.Own, 1e-12, "charged once: the answered call only")
	require.True(t, strings.Contains(strings.Join(seen(), "\n"), "change of plan"), "the message reached the model: %v", seen())

	fin := e.Spool("thread", "send", id, "--message", "too late")
	require.Equal(t, 1, fin.Code, "a finished thread takes no message")
	require.Contains(t, fin.Stderr, "resume")
}

// TestSendReachesTheNextCall: a message sent to a running thread is in its
// transcript before the next model call, which sees it.
func TestSendReachesTheNextCall(t *testing.T) {
	t.Parallel()
	files := peopleProject()
	delete(files, ".ai/config/agent/approvals.yaml")
	files["scripts/slow.yaml"] = "latency: 4000ms\n" + script("people") // the send (a CLI process) lands within the first call
	e := workerEnv(t, files, "2")
	id := startThread(t, e, "p/write", "--model", "script:scripts/slow.yaml")
	require.Eventually(t, func() bool {
		r, err := e.Orch.Record(context.Background(), id)
		return err == nil && r.Status == thread.StatusRunning
	}, time.Minute, 10*time.Millisecond)
	res := e.Spool("thread", "send", id, "--message", "remember the milk", "--by", "ada")
	require.Equal(t, 0, res.Code, res.Stderr)
	rec := e.Wait([]string{id}, time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, rec.Status)
	evs := transcriptEvents(t, e, id)
	msgAt, outAfter := -1, -1
	for i, ev := range evs {
		switch ev["event_type"] {
		case "user_message":
			require.Equal(t, "remember the milk", payload(ev)["content"])
			msgAt = i
		case "cognition_out":
			if msgAt >= 0 && outAfter < 0 {
				outAfter = i
			}
		}
	}
	require.GreaterOrEqual(t, msgAt, 0, "the message is in the transcript")
	require.Greater(t, outAfter, msgAt, "before the next model call's answer")
}

// TestApprovalWebhook: each pending call is POSTed to the project's
// webhook, signed as Standard Webhooks sign, with one-time approve and deny
// links; the approve link decides the call, once.
func TestApprovalWebhook(t *testing.T) {
	t.Parallel()
	const secret = "whsec_c3Bvb2wtdGVzdC1zZWNyZXQ="
	got := make(chan *http.Request, 4)
	bodies := make(chan []byte, 4)
	var fails atomic.Int32
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if fails.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable) // the first delivery fails: it is retried
			return
		}
		got <- r
		bodies <- b
	}))
	t.Cleanup(hook.Close)
	files := peopleProject()
	files[".ai/config/agent/approvals.yaml"] = peopleApprovals + fmt.Sprintf("notify:\n  url: ${SPOOL_TEST_HOOK_URL}\n  secret: %s\n  links: http://spool.example\n", secret)
	e := spooltest.New(t, spooltest.Options{Files: files})
	// The URL comes from the worker's environment (${VAR} in approvals.yaml).
	e.Start([]string{"SPOOL_TEST_HOOK_URL=" + hook.URL}, "worker", "--concurrency", "2")
	id := startThread(t, e, "p/write", "--model", "script:scripts/p.yaml")

	var r *http.Request
	var body []byte
	select {
	case r = <-got:
		body = <-bodies
	case <-time.After(time.Minute):
		t.Fatal("no webhook delivery")
	}
	msgID, ts := r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp")
	require.NotEmpty(t, msgID)
	require.Equal(t, "v1,"+worker.WebhookSignature(secret, msgID, ts, body), r.Header.Get("webhook-signature"))
	var msg worker.ApprovalWebhook
	require.NoError(t, json.Unmarshal(body, &msg))
	require.Equal(t, id, msg.ThreadID)
	require.Equal(t, "rye/file-system/fs_write", msg.Tool)
	require.True(t, strings.HasPrefix(msg.ApproveURL, "http://spool.example/v1/approvals/decide?token="))

	// The link, sent to `spool api` (which needs a token for everything
	// else): GET shows the call and decides nothing, POST decides it once.
	link := strings.TrimPrefix(msg.ApproveURL, "http://spool.example")
	deny := strings.TrimPrefix(msg.DenyURL, "http://spool.example")
	waitForApproval(t, e, id)
	srv := startAPI(t, e, "--addr", "0.0.0.0:0", "--token", "an-api-token-of-32-characters-xx")
	_, port, _ := strings.Cut(srv.addr, "]:")
	if port == "" {
		_, port, _ = strings.Cut(srv.addr, ":")
	}
	raw := apiCall{t: t, hc: &http.Client{Transport: newOpenAPITransport(t)}, base: "http://127.0.0.1:" + port}
	for range 2 {
		status, _, b := raw.do(http.MethodGet, link, "")
		require.Equal(t, http.StatusOK, status, string(b))
		var shown api.DecisionLink
		require.NoError(t, json.Unmarshal(b, &shown))
		require.Equal(t, registry.DecisionApprove, shown.Decision)
		require.Equal(t, msg.CallID, shown.Call.CallID)
	}
	raw.problem(http.StatusBadRequest, "bad_request", http.MethodPost, deny, "")
	raw.problem(http.StatusForbidden, "forbidden", http.MethodPost, link[:len(link)-2]+"xx", "")
	raw.problem(http.StatusForbidden, "forbidden", http.MethodPost, link, "", func(r *http.Request) { r.Header.Set("Sec-Fetch-Site", "cross-site") })
	status, _, b := raw.do(http.MethodPost, link, "")
	require.Equal(t, http.StatusOK, status, string(b))
	var d orchestrator.DecideResult
	require.NoError(t, json.Unmarshal(b, &d))
	require.True(t, d.Woken)
	require.Equal(t, "link", d.By)
	raw.problem(http.StatusConflict, "not_pending", http.MethodPost, link, "")
	raw.problem(http.StatusConflict, "not_pending", http.MethodGet, link, "")
	rec := e.Wait([]string{id}, time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, rec.Status)
}
