package e2e

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// noLimitsDirective renders a directive with no <limits> at all: every
// limit is the project's default (resilience.yaml, else spool's).
func noLimitsDirective(name, perms, inputs string) string {
	return fmt.Sprintf("# %s\n\n```xml\n<directive name=%q version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n    <permissions>%s</permissions>\n  </metadata>\n  <inputs>%s</inputs>\n</directive>\n```\n",
		name, name, perms, inputs)
}

const nInput = `<input name="n" type="integer">n</input>`

func budgetProject() map[string]string {
	return map[string]string{
		".ai/directives/b/root.md":    noLimitsDirective("root", spawnPerms, ""),
		".ai/directives/b/kid.md":     noLimitsDirective("kid", fsPerms, nInput),
		".ai/directives/b/chain.md":   noLimitsDirective("chain", spawnPerms, nInput),
		".ai/directives/b/spender.md": noLimitsDirective("spender", fsPerms, ""),
		".ai/directives/b/guard.md":   noLimitsDirective("guard", spawnPerms, ""),
		".ai/directives/b/pair.md":    noLimitsDirective("pair", spawnPerms, ""),
		".ai/directives/b/costly.md":  noLimitsDirective("costly", fsPerms, ""),
		"scripts/b.yaml":              script("budget"),
	}
}

// requireTreeAddsUp checks, for every chain of the tree, that its ledger
// entry spent exactly what its threads and its descendants spent, to the
// nano-dollar, and that nothing is left reserved.
func requireTreeAddsUp(t *testing.T, e *spooltest.Env, all []*registry.Record) {
	t.Helper()
	own := map[string]int64{} // ledger id → the chain's own spend
	for _, r := range all {
		n, err := ledger.ToNano(r.Cost.Spend)
		require.NoError(t, err)
		own[r.LedgerID()] += n
	}
	ids := make([]string, 0, len(own))
	for id := range own {
		ids = append(ids, id)
	}
	entries, err := e.Orch.LedgerEntries(t.Context(), ids)
	require.NoError(t, err)
	below := map[string]int64{}
	for id, en := range entries {
		require.Equal(t, own[id], en.OwnNano, "%s: the ledger's own spend is the chain's recorded spend", id)
		below[en.ParentID] += en.ActualNano
		require.Zero(t, en.ReservedNano, "%s: nothing left reserved", id)
		require.LessOrEqual(t, en.ActualNano, en.MaxNano, "%s: within its ceiling", id)
	}
	for id, en := range entries {
		require.Equal(t, en.OwnNano+below[id], en.ActualNano, "%s: spent = own + children's", id)
	}
}

// TestTreeUnderDefaultLimits runs a tree with no limit set anywhere: a
// root spawning three children in one turn, three async children it waits
// on, and a three-level chain. Every thread completes and the root's
// ledger spent exactly the sum of every thread's spend.
func TestTreeUnderDefaultLimits(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, budgetProject(), "3")
	rec, res := runJSON(t, e, "b/root", "--model", "script:scripts/b.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status, rec.Error)
	require.Equal(t, "root done", rec.Result)

	all := tree(t, e, rec.ThreadID)
	require.Len(t, all, 1+6+3, "root, six kids, three chain levels")
	var sum float64
	byDir := map[string]int{}
	for _, r := range all {
		require.Equal(t, thread.StatusCompleted, r.Status, "%s: %v", r.ThreadID, r.Error)
		byDir[r.Directive]++
		sum += r.Cost.Spend
		if r.ParentID != "" {
			p, err := e.Orch.Record(t.Context(), r.ParentID)
			require.NoError(t, err)
			require.LessOrEqual(t, r.Limits.Spend, p.Limits.Spend, "a child's ceiling is within its parent's")
		}
	}
	require.Equal(t, map[string]int{"b/root": 1, "b/kid": 6, "b/chain": 3}, byDir)
	root, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	want, err := ledger.ToNano(sum)
	require.NoError(t, err)
	require.Equal(t, want, root.ActualNano, "the root's ledger spent the sum of every thread's spend")
	requireTreeAddsUp(t, e, all)

	// budget show: the live subtree, its children, and it adds up.
	b := spoolJSON[orchestrator.Budget](t, e, "budget", "show", rec.ThreadID, "--json")
	require.InDelta(t, sum, b.Actual, 1e-9)
	require.InDelta(t, rec.Cost.Spend, b.Own, 1e-9)
	require.Len(t, b.Children, 7)
	var kids float64
	for _, k := range b.Children {
		kids += k.Actual
	}
	require.InDelta(t, b.Actual-b.Own, kids, 1e-9, "the children's spend is the subtree's minus the root's own")
	require.InDelta(t, b.Max-b.Actual-b.Reserved, b.Remaining, 1e-9)
}

// TestResumeCarriesBudget: a resume goes on with what its chain has left,
// never a fresh default, and a chain of resumes cannot spend more than the
// first thread's limit.
func TestResumeCarriesBudget(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, budgetProject(), "2")
	// A million tokens a turn: past the default tokens limit.
	rec := runCompleted(t, e, "b/spender", "--model", "script:scripts/b.yaml", "--limit", "spend=2.5", "--limit", "tokens=10000000")
	require.InDelta(t, 1.0, rec.Cost.Spend, 1e-9)

	first := rec.ThreadID
	rr := spoolJSON[orchestrator.ResumeResult](t, e, "thread", "resume", first, "--message", "again 0", "--json")
	require.InDelta(t, 1.5, rr.NewThreadResult.Limits.Spend, 1e-9, "resume 0 carries what the chain has left")
	final := e.Wait([]string{rr.NewThreadID}, time.Minute)
	require.Equal(t, thread.StatusCompleted, final[rr.NewThreadID].Status)
	// The second resume waits for its thread, as run --wait does.
	r := e.Spool("thread", "resume", first, "--message", "again 1", "--wait", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Regexp(t, `(?m)^spool: resumed \S+ as \S+ \(\d+ turns? reconstructed\)$`, r.Stderr)
	var waited registry.Record
	r.JSON(t, &waited)
	require.Equal(t, thread.StatusCompleted, waited.Status)
	require.InDelta(t, 0.5, waited.Limits.Spend, 1e-9, "resume 1 carries what the chain has left")
	en, err := e.Orch.LedgerEntry(t.Context(), first)
	require.NoError(t, err)
	require.InDelta(t, 2.5, en.Actual, 1e-9, "the chain spent its first thread's limit and no more")
	require.InDelta(t, 0.5, en.Overrun, 1e-9, "the last call's dollar did not fit: half of it is overrun")

	r = e.Spool("thread", "resume", first, "--message", "one more")
	require.Equal(t, 1, r.Code, r.Stdout)
	require.Contains(t, r.Stderr, "spend_exceeded")
	require.Equal(t, 1, strings.Count(r.Stderr, "\n"), "one line: %s", r.Stderr)
}

// TestHandoffCarriesBudget: each continuation of a handoff chain goes on
// with what the chain has left, in the chain's one ledger entry.
func TestHandoffCarriesBudget(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, handoffProject(), "2")
	rec := runCompleted(t, e, "t/long", "--model", "script:scripts/h.yaml")
	chain, err := e.Orch.ChainRecords(t.Context(), rec.ChainRootID)
	require.NoError(t, err)
	require.Len(t, chain, 3)
	spent := 0.0
	for _, r := range chain {
		require.InDelta(t, 1.0-spent, r.Limits.Spend, 1e-9, "%s starts with what the chain has left", r.ThreadID)
		require.Equal(t, rec.ChainRootID, r.LedgerID())
		spent += r.Cost.Spend
	}
	en, err := e.Orch.LedgerEntry(t.Context(), rec.ChainRootID)
	require.NoError(t, err)
	require.InDelta(t, spent, en.Own, 1e-9)
	require.Equal(t, "completed", en.Status)
	for _, r := range chain[1:] {
		_, err := e.Orch.LedgerEntry(t.Context(), r.ThreadID)
		require.ErrorIs(t, err, ledger.ErrNotFound, "a continuation has no entry of its own")
	}
}

// TestReserveKeepsTheGuarantee: a spawn with reserve: true sets its whole
// amount aside up front; a second one that does not fit is refused, and
// the refusal is in the parent's transcript.
func TestReserveKeepsTheGuarantee(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, budgetProject(), "2")
	rec := runCompleted(t, e, "b/guard", "--model", "script:scripts/b.yaml", "--limit", "spend=1")
	require.Contains(t, rec.Result, "spend_exceeded", "the second reservation's refusal is the call's result")

	kids := children(t, e, rec.ThreadID)
	require.Len(t, kids, 1)
	ke, err := e.Orch.LedgerEntry(t.Context(), kids[0].ThreadID)
	require.NoError(t, err)
	require.True(t, ke.Guaranteed)
	require.Equal(t, 0.6, ke.Max)

	refused := payloads[transcript.ChildRefused](t, events(t, e, rec.ThreadID), transcript.TypeChildRefused)
	require.Len(t, refused, 1)
	require.Equal(t, "b/kid", refused[0].Directive)
	require.Equal(t, thread.CodeSpendExceeded, refused[0].Code)
	require.Contains(t, refused[0].Message, "cannot set 0.6 USD aside")
	requireTreeAddsUp(t, e, tree(t, e, rec.ThreadID))
	require.False(t, math.IsNaN(ke.Actual))
}

// TestChargeStopsAtAncestorCeiling: two children admitted with all their
// parent has left spend it together; the charge that does not fit is
// clamped at the parent's ceiling (never past it), and that child stops
// with spend_exceeded naming the ancestor whose budget is spent.
func TestChargeStopsAtAncestorCeiling(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, budgetProject(), "3")
	// 0.0002 for the pair's turn; each child's three turns cost 0.002 each:
	// 0.012 asked of a root that can spend 0.01.
	rec, res := runJSON(t, e, "b/pair", "--model", "script:scripts/b.yaml", "--limit", "spend=0.01")
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Equal(t, thread.StatusError, rec.Status)
	require.Equal(t, thread.CodeSpendExceeded, rec.Error.Code, "the root wakes to a spent budget and stops before a call it cannot pay")

	all := tree(t, e, rec.ThreadID)
	require.Len(t, all, 3)
	stopped := 0
	for _, r := range all {
		if r.ParentID == "" || r.Status == thread.StatusCompleted {
			continue
		}
		stopped++
		require.Equal(t, thread.StatusError, r.Status)
		require.Equal(t, thread.CodeSpendExceeded, r.Error.Code)
		require.Contains(t, r.Error.Message, "ancestor "+rec.ThreadID, "names the ceiling it hit")
	}
	require.GreaterOrEqual(t, stopped, 1)
	root, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.Equal(t, root.MaxNano, root.ActualNano, "the root spent its ceiling exactly")
	var overrun int64
	for _, r := range all {
		if en, err := e.Orch.LedgerEntry(t.Context(), r.LedgerID()); err == nil {
			overrun += en.OverrunNano
		}
	}
	require.Positive(t, overrun, "what did not fit is recorded as overrun")
	b := spoolJSON[orchestrator.Budget](t, e, "budget", "show", rec.ThreadID, "--json")
	require.InDelta(t, 0.01, b.Actual, 1e-12)
	require.InDelta(t, 0, b.Remaining, 1e-12)
}
