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

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
)

// TestApprovalWebhookWire: the webhook's body is the pending call as
// `spool thread approvals --json` prints it, between its type and the
// decision links, field for field.
func TestApprovalWebhookWire(t *testing.T) {
	at := time.Date(2026, 11, 24, 8, 0, 0, 0, time.UTC)
	pa := registry.PendingApproval{CallID: "c1", Tool: "rye/file-system/fs_write", Input: json.RawMessage(`{"path":"a"}`),
		RequestedAt: at, Deadline: at.Add(time.Hour), OnTimeout: "deny"}
	msg := ApprovalWebhook{Type: "approval.requested", PendingCall: orchestrator.PendingCallOf("t-1", "d/x", pa),
		ApproveURL: "https://a", DenyURL: "https://d"}
	body, err := json.Marshal(msg)
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"approval.requested","thread_id":"t-1","directive":"d/x","call_id":"c1",
		"tool":"rye/file-system/fs_write","input":{"path":"a"},"requested_at":"2026-11-24T08:00:00Z",
		"deadline":"2026-11-24T09:00:00Z","on_timeout":"deny","approve_url":"https://a","deny_url":"https://d"}`, string(body))

	// No deadline, no links: neither is written (nor what a timeout does).
	pa.Deadline, pa.OnTimeout = time.Time{}, ""
	body, err = json.Marshal(ApprovalWebhook{Type: "approval.requested", PendingCall: orchestrator.PendingCallOf("t-1", "d/x", pa)})
	require.NoError(t, err)
	require.JSONEq(t, `{"type":"approval.requested","thread_id":"t-1","directive":"d/x","call_id":"c1",
		"tool":"rye/file-system/fs_write","input":{"path":"a"},"requested_at":"2026-11-24T08:00:00Z"}`, string(body))
}

// TestDeliverWebhookRetries: a webhook that fails (a 503, then a dropped
// connection) is tried again after 1s and 2s with the same message id,
// each attempt signed for its own timestamp; a context that ends stops
// the retries at once with its error.
func TestDeliverWebhookRetries(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var ids []string
	var times []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		n := len(ids)
		ids = append(ids, r.Header.Get("webhook-id"))
		times = append(times, time.Now())
		mu.Unlock()
		want := "v1," + WebhookSignature("whsec_c2VjcmV0", r.Header.Get("webhook-id"), r.Header.Get("webhook-timestamp"), body)
		if r.Header.Get("webhook-signature") != want {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch n {
		case 0:
			w.WriteHeader(http.StatusServiceUnavailable)
		case 1:
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					_ = conn.Close()
				}
			}
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	defer srv.Close()
	require.NoError(t, deliverWebhook(t.Context(), srv.Client(), srv.URL, "whsec_c2VjcmV0", []byte(`{"a":1}`), time.Now))
	mu.Lock()
	require.Len(t, ids, 3)
	require.Equal(t, ids[0], ids[1])
	require.Equal(t, ids[0], ids[2])
	require.GreaterOrEqual(t, times[1].Sub(times[0]), time.Second)
	require.GreaterOrEqual(t, times[2].Sub(times[1]), 2*time.Second)
	mu.Unlock()

	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusBadGateway) }))
	defer down.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	require.ErrorIs(t, deliverWebhook(ctx, down.Client(), down.URL, "s", []byte(`{}`), time.Now), context.DeadlineExceeded)
	require.Less(t, time.Since(began), time.Second)
}
