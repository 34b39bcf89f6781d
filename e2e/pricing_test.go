package e2e

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/spooltest"
	"github.com/spool-run/spool/thread"
)

// TestUnpricedModelFailsBeforeAnyCall runs a thread on a model that the
// provider serves but no price table knows: it must fail with
// pricing_error before it calls the model, since the spend of a call it
// cannot price could not be charged. The same model priced by the
// project's pricing.yaml runs.
func TestUnpricedModelFailsBeforeAnyCall(t *testing.T) {
	t.Parallel()
	srv, calls := anthropicServer(t)
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/chat.md":      directive("chat", `turns="3"`, fsPerms, `<success>done</success>`),
		".ai/config/agent/pricing.yaml": "models:\n  claude-priced-9: {input_per_mtok: 1.00, output_per_mtok: 5.00}\n",
	}})
	env := []string{"ANTHROPIC_BASE_URL=" + srv.URL, "ANTHROPIC_API_KEY=test-key"}
	w := e.Start(env, "worker", "--concurrency", "2")

	rec, res := runJSON(t, e, "t/chat", "--model", "claude-unpriced-9")
	require.Equal(t, 1, res.Code, "a thread that ended in error exits 1")
	require.Equal(t, thread.StatusError, rec.Status)
	require.NotNil(t, rec.Error)
	require.Equal(t, "pricing_error", rec.Error.Code)
	require.Contains(t, rec.Error.Message, `unknown model "claude-unpriced-9"`)
	require.Contains(t, rec.Error.Message, ".ai/config/agent/pricing.yaml", "the message says where to add the price")
	require.Zero(t, calls.Load(), "the model was never called")
	require.Zero(t, rec.Cost.Turns)
	require.Zero(t, rec.Cost.Spend)
	entry, err := e.Orch.Ledger.Get(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.Zero(t, entry.Actual)
	require.Equal(t, "error", entry.Status)

	rec, res = runJSON(t, e, "t/chat", "--model", "claude-priced-9")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status)
	require.Equal(t, "recovered after the rate limit", rec.Result)
	require.InDelta(t, (42*1.0+7*5.0)/1e6, rec.Cost.Spend, 1e-12, "priced by the project's table")

	// Checked last, long after the first thread's activation returned.
	require.NotContains(t, w.Log(), "panic", "a thread failed before its hooks were loaded runs none")
	require.NotContains(t, w.Log(), "activation failed")
}
