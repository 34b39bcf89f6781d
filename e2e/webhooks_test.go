package e2e

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/worker"
)

// hookReceiver is a webhook endpoint on a real socket: it answers 500 to
// its first fail requests, and records every request.
type hookReceiver struct {
	mu   sync.Mutex
	fail int
	got  []hookRequest
	srv  *http.Server
	addr string
}

type hookRequest struct {
	id, ts, sig string
	body        []byte
	ok          bool
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	ok := len(h.got) >= h.fail
	h.got = append(h.got, hookRequest{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body, ok})
	h.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// serve listens on addr ("127.0.0.1:0": any port).
func (h *hookReceiver) serve(t *testing.T, addr string) {
	l, err := net.Listen("tcp", addr)
	require.NoError(t, err)
	h.addr = l.Addr().String()
	h.srv = &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = h.srv.Serve(l) }()
	t.Cleanup(func() { _ = h.srv.Close() })
}

func (h *hookReceiver) requests() []hookRequest {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]hookRequest(nil), h.got...)
}

// accepted is how many 2xx answers each webhook-id got.
func (h *hookReceiver) accepted() map[string]int {
	out := map[string]int{}
	for _, r := range h.requests() {
		if r.ok {
			out[r.id]++
		}
	}
	return out
}

// TestWebhooksDeliveredOnce: run events reach an endpoint that fails its
// first tries and one that is down for the first minute, each event
// accepted exactly once per webhook-id, signed, with the same id on every
// attempt; a run's --notify URL gets its own; runs end on time while an
// endpoint is down; a worker SIGKILLed with deliveries due leaves them to
// the other; redeliver sends one again with the same id. Bad input is one
// line, exit 2; an unknown delivery exit 1.
func TestWebhooksDeliveredOnce(t *testing.T) {
	t.Parallel()
	flaky := &hookReceiver{fail: 3}
	flaky.serve(t, "127.0.0.1:0")
	// The down endpoint's port, free until it comes up.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	downAddr := l.Addr().String()
	require.NoError(t, l.Close())
	down := &hookReceiver{}
	once := &hookReceiver{}
	once.serve(t, "127.0.0.1:0")

	files := apiProject()
	files[".ai/config/webhooks.yaml"] = "endpoints:\n" +
		"  flaky:\n    url: http://" + flaky.addr + "/hook\n    secret_env: TEST_SPOOL_HOOK_SECRET\n" +
		"    events: [run.completed, run.cancelled, run.waiting_approval]\n" +
		"  down:\n    url: http://" + downAddr + "/hook\n    secret_env: TEST_SPOOL_HOOK_SECRET\n"
	e := spooltest.New(t, spooltest.Options{Files: files})
	const secret = "whsec_c3Bvb2wtd2ViaG9vaw=="
	env := []string{"TEST_SPOOL_HOOK_SECRET=" + secret}
	w1 := e.Start(env, "worker", "--concurrency", "4")
	e.Start(env, "worker", "--concurrency", "4")
	srv := startAPI(t, e)
	began := time.Now()

	const greets = 10
	ids := submitRuns(t, srv.base, greets, 4, func(i int) spooltype.RunRequest {
		return spooltype.RunRequest{Directive: "t/greet", Model: "script:scripts/api.yaml", Inputs: map[string]any{"name": "n"}}
	})
	notified, err := postRun(srv.base, spooltype.RunRequest{Directive: "t/greet", Model: "script:scripts/api.yaml",
		Inputs: map[string]any{"name": "n"}, Notify: "http://" + once.addr + "/one"})
	require.NoError(t, err)
	gated, err := postRun(srv.base, spooltype.RunRequest{Directive: "t/gated", Model: "script:scripts/api.yaml"})
	require.NoError(t, err)
	slow, err := postRun(srv.base, spooltype.RunRequest{Directive: "t/slow", Model: "script:scripts/api.yaml"})
	require.NoError(t, err)
	require.Equal(t, 0, e.Spool("thread", "cancel", slow).Code)

	// The runs end on time, the down endpoint failing all along.
	recs := e.Wait(append(append([]string{}, ids...), notified, slow), 45*time.Second)
	for _, id := range append(ids, notified) {
		require.Equal(t, thread.StatusCompleted, recs[id].Status, id)
	}
	require.Equal(t, thread.StatusCancelled, recs[slow].Status)
	require.Eventually(t, func() bool {
		rs, err := e.Orch.Records(t.Context(), []string{gated})
		return err == nil && rs[0].Status == thread.StatusWaiting && rs[0].WaitingFor == "approval"
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, 0, e.Spool("thread", "approve", gated, "--reason", "ok").Code)
	recs = e.Wait([]string{gated}, 30*time.Second)
	require.Equal(t, thread.StatusCompleted, recs[gated].Status)
	ended := time.Since(began)
	t.Logf("every run ended %.1fs after the first start, the down endpoint down", ended.Seconds())

	// One worker dies with deliveries due; the other takes the relay and
	// the rest when their leases lapse.
	w1.Kill()
	time.Sleep(time.Until(began.Add(time.Minute)))
	down.serve(t, downAddr)

	events := greets + 1 + 2 + 1 // ends, the approval wait, the cancel
	require.Eventually(t, func() bool {
		return len(flaky.accepted()) == events && len(down.accepted()) == events && len(once.accepted()) == 1
	}, 3*time.Minute, 200*time.Millisecond, "flaky %d, down %d, notify %d", len(flaky.accepted()), len(down.accepted()), len(once.accepted()))
	time.Sleep(2 * time.Second) // anything delivered twice would show now

	for name, rc := range map[string]*hookReceiver{"flaky": flaky, "down": down} {
		for id, n := range rc.accepted() {
			require.Equal(t, 1, n, "%s accepted %s %d times", name, id, n)
		}
		types := map[string]int{}
		for _, r := range rc.requests() {
			require.Equal(t, "v1,"+worker.WebhookSignature(secret, r.id, r.ts, r.body), r.sig, "%s: signed", name)
			var ev struct {
				Type string           `json:"type"`
				Run  spooltype.Record `json:"run"`
			}
			require.NoError(t, json.Unmarshal(r.body, &ev))
			if r.ok {
				types[ev.Type]++
			}
			if ev.Type != "run.waiting_approval" {
				require.Equal(t, orchestrator.WebhookEventID(ev.Run.ThreadID, ev.Type, ""), r.id, "%s: the id is the event's", name)
			}
		}
		require.Equal(t, map[string]int{"run.completed": greets + 2, "run.cancelled": 1, "run.waiting_approval": 1}, types, name)
	}
	require.Len(t, flaky.requests(), events+3, "three failed attempts, then each event once")
	require.Empty(t, once.requests()[0].sig, "no SPOOL_NOTIFY_SECRET on the workers: unsigned")
	require.Equal(t, orchestrator.WebhookEventID(notified, "run.completed", ""), once.requests()[0].id)

	// The CLI's view.
	r := e.Spool("webhook", "deliveries", "--endpoint", "down", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var ds struct {
		Deliveries []orchestrator.WebhookDelivery `json:"deliveries"`
	}
	r.JSON(t, &ds)
	require.Len(t, ds.Deliveries, events)
	retried := 0
	for _, d := range ds.Deliveries {
		require.Equal(t, orchestrator.DeliveryDelivered, d.Status)
		require.Equal(t, 204, d.LastCode)
		if d.Attempts > 1 {
			retried++
		}
	}
	require.Equal(t, events, retried, "every delivery to the down endpoint was tried before it came up")
	r = e.Spool("webhook", "list", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var list struct {
		Endpoints []struct {
			Name   string         `json:"name"`
			Counts map[string]int `json:"deliveries"`
		} `json:"endpoints"`
	}
	r.JSON(t, &list)
	require.Len(t, list.Endpoints, 3)
	require.Equal(t, "--notify", list.Endpoints[2].Name)
	require.Equal(t, map[string]int{"delivered": events}, list.Endpoints[0].Counts)

	// Redelivered: the same id once more.
	target := ds.Deliveries[0]
	r = e.Spool("webhook", "redeliver", target.ID)
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Eventually(t, func() bool { return down.accepted()[target.EventID] == 2 }, 30*time.Second, 100*time.Millisecond)

	for _, bad := range [][]string{{"webhook", "redeliver"}, {"webhook", "redeliver", "nope"}, {"webhook", "deliveries", "--status", "lost"},
		{"thread", "run", "t/greet", "--notify", "ftp://x"}} {
		oneLine(t, e.Spool(bad...), 2, "")
	}
	oneLine(t, e.Spool("webhook", "redeliver", "dlv_000000000000000000000000"), 1, "not found")
}
