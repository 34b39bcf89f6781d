package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	spooldirective "github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestUnpricedModelFailsBeforeAnyCall runs a thread on a model that the
// provider serves but no price table knows. `spool thread run` refuses it
// (exit 2) before any thread exists; a thread that reaches a worker by
// another way (a spawn's model, the scheduler) fails with pricing_error
// before it calls the model, since the spend of a call it cannot price
// could not be charged. The same model priced by the project's
// pricing.yaml runs.
func TestUnpricedModelFailsBeforeAnyCall(t *testing.T) {
	t.Parallel()
	srv, calls := anthropicServer(t)
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/chat.md":      directive("chat", `turns="3"`, fsPerms, `<success>done</success>`),
		".ai/config/agent/pricing.yaml": "models:\n  claude-priced-9: {input_per_mtok: 1.00, output_per_mtok: 5.00}\n",
	}})
	env := anthropicEnv(srv)
	w := e.Start(env, "worker", "--concurrency", "2")

	res := e.SpoolContext(t.Context(), quietEnv(), "thread", "run", "t/chat", "--model", "claude-unpriced-9", "--wait")
	require.Equal(t, 2, res.Code, res.Stderr)
	require.Equal(t, "spool: unknown model \"claude-unpriced-9\": add it to .ai/config/agent/pricing.yaml\n", res.Stderr)
	recs, err := e.Orch.Threads(t.Context(), registry.Filter{})
	require.NoError(t, err)
	require.Empty(t, recs, "refused before any thread exists")

	digest, err := spooldirective.BuildBundle(t.Context(), e.Store, e.Project, t.TempDir(), nil)
	require.NoError(t, err)
	started, err := e.Orch.Start(t.Context(), orchestrator.StartRequest{Directive: "t/chat", Model: "claude-unpriced-9", Bundle: digest})
	require.NoError(t, err)
	rec := e.Wait([]string{started.ThreadID}, 2*time.Minute)[started.ThreadID]
	require.Equal(t, thread.StatusError, rec.Status)
	require.NotNil(t, rec.Error)
	require.Equal(t, "pricing_error", rec.Error.Code)
	require.Contains(t, rec.Error.Message, `unknown model "claude-unpriced-9"`)
	require.Contains(t, rec.Error.Message, ".ai/config/agent/pricing.yaml", "the message says where to add the price")
	require.Zero(t, calls.Load(), "the model was never called")
	require.Zero(t, rec.Cost.Turns)
	require.Zero(t, rec.Cost.Spend)
	entry, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.Zero(t, entry.Actual)
	require.Equal(t, "error", entry.Status)

	rec, res = runJSON(t, e, "t/chat", "--model", "claude-priced-9")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status)
	require.Equal(t, "recovered after the rate limit", rec.Result)
	require.InDelta(t, (42*1.0+7*5.0)/1e6, rec.Cost.Spend, 1e-12, "priced by the project's table")

	// A replay and a fork run the recording's project: its table prices
	// the model for them too.
	for _, args := range [][]string{{"thread", "replay", rec.ThreadID, "--model", "claude-priced-9"},
		{"thread", "fork", rec.ThreadID, "--at-turn", "1", "--model", "claude-priced-9"}} {
		res := e.SpoolContext(t.Context(), append(quietEnv(), env...), args...)
		require.NotEqual(t, 2, res.Code, "%v: %s", args, res.Stderr)
		require.NotContains(t, res.Stderr, "unknown model", "%v", args)
	}

	// Checked last, long after the first thread's activation returned.
	require.NotContains(t, w.Log(), "panic", "a thread failed before its hooks were loaded runs none")
	require.NotContains(t, w.Log(), "activation failed")
}
