package worker

import (
	"encoding/json"
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
