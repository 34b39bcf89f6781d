package worker

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

// receiver is a webhook endpoint that answers 503 to its first fail
// requests and records every request.
type receiver struct {
	mu   sync.Mutex
	fail int
	reqs []received
	srv  *httptest.Server
}

type received struct {
	id, ts, sig string
	body        []byte
	code        int
}

func newReceiver(t *testing.T, fail int) *receiver {
	rc := &receiver{fail: fail}
	rc.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		rc.mu.Lock()
		code := http.StatusNoContent
		if len(rc.reqs) < rc.fail {
			code = http.StatusServiceUnavailable
		}
		rc.reqs = append(rc.reqs, received{r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), r.Header.Get("webhook-signature"), body, code})
		rc.mu.Unlock()
		w.WriteHeader(code)
	}))
	t.Cleanup(rc.srv.Close)
	return rc
}

func (rc *receiver) got() []received {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return append([]received(nil), rc.reqs...)
}

// TestWebhooksOnRunEvents: a root's end is one event in the outbox,
// written by the finalize that ends it (a child's end is none); relaying
// it twice (a relay that died before dropping it) makes one delivery per
// endpoint; an endpoint that fails twice gets the event a third time
// with the same webhook-id, each attempt signed for its timestamp, and
// the --notify URL gets it unsigned; redeliver sends it once more, with
// the same id and body.
func TestWebhooksOnRunEvents(t *testing.T) {
	ops := newReceiver(t, 2)
	one := newReceiver(t, 0)
	t.Setenv("TEST_SPOOL_WEBHOOK_SECRET", "whsec_c2VjcmV0")
	h := setup(t, map[string]string{".ai/config/webhooks.yaml": "endpoints:\n  ops:\n    url: " + ops.srv.URL +
		"\n    secret_env: TEST_SPOOL_WEBHOOK_SECRET\n    events: [run.completed, run.error]\n"},
		Config{WebhookPoll: -1, WebhookBackoff: 20 * time.Millisecond})
	rt := h.o.Runtime()
	keys := rt.Services().Keys

	h.prov.script("h/a", call("rye/agent/threads/thread_directive", `{"directive_name":"h/kid"}`), say("parent done"))
	h.prov.script("h/kid", say("kid done"))
	rec, err := h.o.Start(h.ctx, orchestrator.StartRequest{Directive: "h/a", Bundle: h.bundle, Model: fakeModel, Notify: one.srv.URL})
	require.NoError(t, err)
	require.True(t, rec.Webhooks)
	h.drain(true)
	require.Equal(t, thread.StatusCompleted, h.record(rec.ThreadID).Status)

	rdb := rt.Services().Redis
	entries, err := rdb.XRange(h.ctx, keys.Outbox(rec.ThreadID), "-", "+").Result()
	require.NoError(t, err)
	require.Len(t, entries, 1, "the root's end only: the child's is none")
	require.Equal(t, rec.ThreadID, entries[0].Values["thread"])
	require.Equal(t, "run.completed", entries[0].Values["type"])

	// Relayed once; a second pass has nothing past its cursor.
	n, err := rt.RelayWebhooks(h.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = rt.RelayWebhooks(h.ctx, 100)
	require.NoError(t, err)
	require.Zero(t, n)
	ds, err := h.o.WebhookDeliveries(h.ctx, orchestrator.DeliveryFilter{})
	require.NoError(t, err)
	require.Len(t, ds, 2)
	// A relay that made the deliveries and died before moving its cursor
	// relays the event again and makes nothing new; a failover that lost
	// a delivery and the cursor's advance past it makes it again.
	require.NoError(t, rdb.HDel(h.ctx, keys.WebhookRelayed(), keys.Outbox(rec.ThreadID)).Err())
	n, err = rt.RelayWebhooks(h.ctx, 100)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	again, err := h.o.WebhookDeliveries(h.ctx, orchestrator.DeliveryFilter{})
	require.NoError(t, err)
	require.Len(t, again, 2)
	lost := ds[0]
	require.NoError(t, rdb.Del(h.ctx, keys.WebhookDelivery(lost.ID)).Err())
	require.NoError(t, rdb.ZRem(h.ctx, keys.WebhookAll(), lost.ID).Err())
	require.NoError(t, rdb.ZRem(h.ctx, keys.WebhookDue(), lost.ID).Err())
	require.NoError(t, rdb.HDel(h.ctx, keys.WebhookRelayed(), keys.Outbox(rec.ThreadID)).Err())
	_, err = rt.RelayWebhooks(h.ctx, 100)
	require.NoError(t, err)
	remade, err := h.o.WebhookDelivery(h.ctx, lost.ID)
	require.NoError(t, err)
	require.Equal(t, lost.EventID, remade.EventID)
	require.Equal(t, orchestrator.DeliveryPending, remade.Status)

	// The worker's loop delivers both.
	ctx, stop := context.WithCancel(h.ctx)
	h.w.cfg.WebhookPoll = 10 * time.Millisecond
	done := make(chan struct{})
	go func() { defer close(done); h.w.webhookLoop(ctx) }()
	t.Cleanup(func() { stop(); <-done })
	require.Eventually(t, func() bool {
		ds, err := h.o.WebhookDeliveries(h.ctx, orchestrator.DeliveryFilter{})
		require.NoError(t, err)
		for _, d := range ds {
			if d.Status != orchestrator.DeliveryDelivered {
				return false
			}
		}
		return true
	}, 20*time.Second, 20*time.Millisecond)

	got := ops.got()
	require.Len(t, got, 3, "two 503s, then delivered")
	eventID := orchestrator.WebhookEventID(rec.ThreadID, "run.completed", "")
	for _, r := range got {
		require.Equal(t, eventID, r.id)
		require.Equal(t, "v1,"+WebhookSignature("whsec_c2VjcmV0", r.id, r.ts, r.body), r.sig)
		require.Equal(t, string(got[0].body), string(r.body))
	}
	var body struct {
		Type string `json:"type"`
		Run  struct {
			ThreadID string `json:"thread_id"`
			Status   string `json:"status"`
			Result   string `json:"result"`
		} `json:"run"`
	}
	require.NoError(t, json.Unmarshal(got[0].body, &body))
	require.Equal(t, "run.completed", body.Type)
	require.Equal(t, rec.ThreadID, body.Run.ThreadID)
	require.Equal(t, "completed", body.Run.Status)
	require.Equal(t, "parent done", body.Run.Result)
	gotOne := one.got()
	require.Len(t, gotOne, 1)
	require.Equal(t, eventID, gotOne[0].id, "one event, one id at every endpoint")
	require.Empty(t, gotOne[0].sig, "no secret for --notify here: unsigned")

	opsDelivery, err := h.o.WebhookDeliveries(h.ctx, orchestrator.DeliveryFilter{Endpoint: "ops"})
	require.NoError(t, err)
	require.Len(t, opsDelivery, 1)
	require.Equal(t, 3, opsDelivery[0].Attempts)
	require.Equal(t, 204, opsDelivery[0].LastCode)

	// Redelivered: once more, the same id and body.
	_, err = h.o.Redeliver(h.ctx, opsDelivery[0].ID)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(ops.got()) == 4 }, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, eventID, ops.got()[3].id)
	require.Equal(t, string(got[0].body), string(ops.got()[3].body))
	_, err = h.o.Redeliver(h.ctx, "dlv_nope")
	require.ErrorIs(t, err, orchestrator.ErrDeliveryNotFound)

	// The counters /metrics exports: three deliveries made (one lost and
	// made again), ops's two failed attempts and two delivered (the
	// redelivery's too), the --notify endpoint's one; nothing due.
	require.Eventually(t, func() bool {
		st, err := h.o.WebhookStats(h.ctx)
		require.NoError(t, err)
		return st.Attempts["ops"]["delivered"] == 2
	}, 10*time.Second, 10*time.Millisecond)
	st, err := h.o.WebhookStats(h.ctx)
	require.NoError(t, err)
	require.Equal(t, int64(3), st.Made["ops"]+st.Made[config.NotifyEndpoint])
	require.Equal(t, map[string]int64{"retrying": 2, "delivered": 2}, st.Attempts["ops"])
	require.Equal(t, map[string]int64{"delivered": 1}, st.Attempts[config.NotifyEndpoint])
	require.Zero(t, st.Due)
	require.True(t, st.OldestDue.IsZero())
}

// TestWebhookBudgetThresholds: a charge that takes a tree's spend across
// 50, 80 or 100 percent of its limit is a budget.threshold event, once
// per share, written by the checkpoint or the finalize that charges, and
// delivered with the share it crossed; an endpoint subscribes to it by
// name only.
func TestWebhookBudgetThresholds(t *testing.T) {
	h := setup(t, map[string]string{".ai/config/webhooks.yaml": "endpoints:\n  money:\n    url: http://127.0.0.1:9/x\n    events: [budget.threshold]\n" +
		"  runs:\n    url: http://127.0.0.1:9/y\n"}, Config{WebhookPoll: -1})
	rt := h.o.Runtime()
	// Two turns of 0.00015 against 0.0003: the first crosses 50%, the
	// last (finalize's charge) 80% and 100%.
	h.prov.script("h/a", call("rye/file-system/fs_list", `{"path":"."}`), say("done"))
	id := h.start("h/a", limits(func(l *thread.Limits) { l.Spend = ptr(0.0003) }))
	require.NoError(t, h.activate(id, "start", 0))
	h.drain(true)
	require.Equal(t, thread.StatusCompleted, h.record(id).Status)
	entries, err := rt.Services().Redis.XRange(h.ctx, rt.Services().Keys.Outbox(id), "-", "+").Result()
	require.NoError(t, err)
	var got []string
	for _, e := range entries {
		got = append(got, e.Values["type"].(string)+":"+e.Values["key"].(string))
	}
	// The end is committed before the last charge, in the same step.
	require.Equal(t, []string{"budget.threshold:50", "run.completed:", "budget.threshold:80", "budget.threshold:100"}, got)

	_, err = rt.RelayWebhooks(h.ctx, 100)
	require.NoError(t, err)
	money, err := h.o.WebhookDeliveries(h.ctx, orchestrator.DeliveryFilter{Endpoint: "money"})
	require.NoError(t, err)
	require.Len(t, money, 3)
	shares := map[int]bool{}
	for _, d := range money {
		var ev orchestrator.WebhookEvent
		require.NoError(t, json.Unmarshal(d.Body, &ev))
		require.Equal(t, "budget.threshold", ev.Type)
		require.Equal(t, id, ev.Run.ThreadID)
		shares[ev.Threshold] = true
	}
	require.Equal(t, map[int]bool{50: true, 80: true, 100: true}, shares)
	runs, err := h.o.WebhookDeliveries(h.ctx, orchestrator.DeliveryFilter{Endpoint: "runs"})
	require.NoError(t, err)
	require.Len(t, runs, 1, "events: none given, run.* only")
	require.Equal(t, "run.completed", runs[0].Type)
}
