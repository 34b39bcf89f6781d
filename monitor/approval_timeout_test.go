package monitor_test

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPendingApprovalSaysItsTimeout: a pending call with a timeout says
// when it times out and what then happens to it (approvals.yaml's
// on_timeout), on /approvals and on its thread's page.
func TestPendingApprovalSaysItsTimeout(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{files: map[string]string{".ai/config/agent/approvals.yaml": "approvals:\n  - tool: t/deploy\n    timeout: 1h\n    on_timeout: approve\n"}})
	rec := e.start("t/gated", map[string]any{"target": "prod"})
	waiting := e.waitRecord(rec.ThreadID, "waited for approval", waitingForApproval)
	require.Len(t, waiting.PendingApprovals, 1)
	deadline := waiting.PendingApprovals[0].Deadline
	require.False(t, deadline.IsZero())
	s := e.session()
	want := " · times out at " + deadline.UTC().Format("2006-01-02 15:04:05 UTC") + " then approve</span>"
	inbox := s.get("/approvals")
	require.Equal(t, http.StatusOK, inbox.code)
	require.Contains(t, inbox.body, want)
	require.NotContains(t, inbox.body, "decided by timeout")
	require.Contains(t, s.get(threadURL(rec.ThreadID)).body, want)
}
