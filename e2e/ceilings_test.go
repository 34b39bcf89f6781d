package e2e

import (
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// ceilingPolicy: acme spends at most 2.50 USD a day and waits when it
// has; trial 1.00 and is refused; burst starts two a minute; one runs
// one root chain at a time.
const ceilingPolicy = `version: 1
tenants:
  acme: {spend_per_day: 2.5, spend_grant: 1}
  trial: {spend_per_day: 1, spend_grant: 1, on_exhausted: refuse}
  burst: {starts_per_minute: 2, on_exhausted: refuse}
  one: {runs_in_flight: 1}
`

// spendArgs run b/spender (one turn of a dollar) for tenant.
func spendArgs(tenant string) []string {
	return []string{"b/spender", "--model", "script:scripts/b.yaml", "--limit", "spend=5", "--limit", "tokens=10000000", "--tenant", tenant}
}

// requireWindow requires tenant's day window, as tenant show gives it,
// to hold spent and nothing else, within its limit.
func requireWindow(t *testing.T, e *spooltest.Env, tenant string, spent float64) {
	t.Helper()
	d := tenantShow(t, e, tenant).Spend["day"]
	require.InDelta(t, spent, d.Spent, 1e-9, "%s: spent today", tenant)
	require.Zero(t, d.Held, "%s: nothing held between runs", tenant)
	require.NotNil(t, d.Limit)
	require.LessOrEqual(t, d.Spent+d.Held, *d.Limit+1e-9, "%s: spent + held ≤ limit", tenant)
	require.Equal(t, time.Now().UTC().Format("2006-01-02"), d.Window)
}

// TestTenantCeilings: through the binary on real Redis, with a policy of
// tenant ceilings published. A daily spend window filled by runs in
// turn (the third finds half a dollar of room: it is lent that, and its
// other half is overrun) leaves the next waiting tenant_budget with no
// task; tenant set raising the ceiling starts it at once; spent + held
// stays within the limit throughout. Under refuse the next start exits
// 1 naming tenant_budget_exhausted and its run is on record, ended error
// with the code. Starts per minute: a burst of the rate, then
// tenant_rate_exceeded. Runs in flight: a second root waits tenant_runs
// until the first chain ends.
func TestTenantCeilings(t *testing.T) {
	t.Parallel()
	files := budgetProject()
	maps.Copy(files, graphProject())
	files[".ai/config/agent/admission.yaml"] = ceilingPolicy
	e := spooltest.New(t, spooltest.Options{Files: files})
	r := e.Spool("admission", "apply")
	require.Equal(t, 0, r.Code, r.Stderr)
	e.StartWorker("--concurrency", "4")

	// acme: 1 + 1 + 0.5 of its 2.5, then a wait.
	for i, want := range []float64{1, 2, 2.5} {
		rec := runCompleted(t, e, spendArgs("acme")...)
		require.InDelta(t, 1, rec.Cost.Spend, 1e-9, "run %d", i)
		requireWindow(t, e, "acme", want)
	}
	waiter := startRun(t, e, append([]string{"thread", "run"}, spendArgs("acme")...)...)
	rec := waitRecord(t, e, waiter, "the fourth waits for the budget", func(r *registry.Record) bool {
		return r.Status == thread.StatusWaiting && r.WaitingFor == "tenant_budget"
	})
	require.Equal(t, "tenant_budget", rec.WaitingFor)
	require.Equal(t, map[string]int{"tenant_budget": 1}, tenantShow(t, e, "acme").Blocked)
	r = e.Spool("tenant", "set", "acme", "--spend-per-day", "5")
	require.Equal(t, 0, r.Code, r.Stderr)
	final := e.Wait([]string{waiter}, time.Minute)[waiter]
	require.Equal(t, thread.StatusCompleted, final.Status)
	requireWindow(t, e, "acme", 3.5)

	// trial: refused once its dollar is spent, the refusal on record.
	runCompleted(t, e, spendArgs("trial")...)
	r = e.Spool(append([]string{"thread", "run"}, spendArgs("trial")...)...)
	require.Equal(t, 1, r.Code, r.Stdout+r.Stderr)
	require.Contains(t, lastLine(r.Stderr), "tenant_budget_exhausted")
	requireRefusedOnRecord(t, e, "trial", "tenant_budget_exhausted")
	requireWindow(t, e, "trial", 1)

	// burst: two starts, then the rate refuses (with when it has room).
	for range 2 {
		startRun(t, e, append([]string{"thread", "run"}, spendArgs("burst")...)...)
	}
	r = e.Spool(append([]string{"thread", "run"}, spendArgs("burst")...)...)
	require.Equal(t, 1, r.Code, r.Stdout+r.Stderr)
	require.Contains(t, lastLine(r.Stderr), "tenant_rate_exceeded")
	require.Contains(t, lastLine(r.Stderr), "room again at")
	requireRefusedOnRecord(t, e, "burst", "tenant_rate_exceeded")

	// one: a second root waits for the first chain to end.
	gate, release := gateFile(t)
	first := startRun(t, e, "thread", "run", "g/waiter", "--input", "item=a", "--input", "gate="+gate, "--tenant", "one")
	waitRecord(t, e, first, "the first root runs", func(r *registry.Record) bool { return r.Status == thread.StatusRunning })
	second := startRun(t, e, "thread", "run", "g/waiter", "--input", "item=b", "--input", "gate="+gate, "--tenant", "one")
	waitRecord(t, e, second, "the second root waits", func(r *registry.Record) bool {
		return r.Status == thread.StatusWaiting && r.WaitingFor == "tenant_runs"
	})
	require.Equal(t, 1, tenantShow(t, e, "one").RunsInFlight)
	release()
	for id, rec := range e.Wait([]string{first, second}, 2*time.Minute) {
		require.Equal(t, thread.StatusCompleted, rec.Status, id)
	}
	require.Eventually(t, func() bool { return tenantShow(t, e, "one").RunsInFlight == 0 }, 30*time.Second, 100*time.Millisecond)
}

// requireRefusedOnRecord requires tenant to have exactly one run ended
// error with code.
func requireRefusedOnRecord(t *testing.T, e *spooltest.Env, tenant, code string) {
	t.Helper()
	r := e.Spool("thread", "list", "--tenant", tenant, "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	listed := listedThreads(t, r)
	var refused []string
	for _, rec := range listed {
		if rec.Status == thread.StatusError && rec.Error != nil && rec.Error.Code == code {
			refused = append(refused, rec.ThreadID)
		}
	}
	require.Len(t, refused, 1, "%s: %s", tenant, strings.Join(refused, ", "))
}

// TestLapsedAllowanceSettled: a run whose worker is SIGKILLed after a
// turn leaves its allowance held (lapsed) in its tenant's day window,
// not spent; the release of its recovered activation settles it with
// what the dead one spent, so the window's spend equals the run's
// recorded spend to the nano-dollar, and nothing stays held.
func TestLapsedAllowanceSettled(t *testing.T) {
	t.Parallel()
	files := graphProject()
	files[".ai/directives/g/payer.md"] = graphDirective("payer", fsPerms+`<execute><tool>g/gate</tool></execute>`,
		`<input name="item" type="string" required="true">item</input><input name="gate" type="string" required="true">gate</input>`)
	files[".ai/config/agent/admission.yaml"] = "version: 1\ntenants:\n  acme: {spend_per_day: 5, spend_grant: 1}\n"
	e := spooltest.New(t, spooltest.Options{Files: files})
	r := e.Spool("admission", "apply")
	require.Equal(t, 0, r.Code, r.Stderr)
	w := e.StartWorker("--concurrency", "2")
	gate, release := gateFile(t)
	id := startRun(t, e, "thread", "run", "g/payer", "--input", "item=a", "--input", "gate="+gate, "--tenant", "acme")
	waitRecord(t, e, id, "the first turn checkpointed", func(r *registry.Record) bool { return r.Cost.Turns >= 1 })
	time.Sleep(300 * time.Millisecond) // into the gate tool
	w.Kill()
	d := tenantShow(t, e, "acme").Spend["day"]
	require.InDelta(t, 1, d.Held, 1e-9, "the dead worker's allowance is held")
	require.Zero(t, d.Spent)
	e.StartWorker("--concurrency", "2")
	release()
	rec := e.Wait([]string{id}, 2*time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, rec.Status)
	require.InDelta(t, 0.06, rec.Cost.Spend, 1e-9)
	require.Eventually(t, func() bool {
		d := tenantShow(t, e, "acme").Spend["day"]
		return d.Held == 0
	}, 10*time.Second, 100*time.Millisecond, "nothing held once the run ended")
	requireWindow(t, e, "acme", rec.Cost.Spend)
}

// thriceScript: b/thrice spends a dollar a turn for three turns.
const thriceScript = `context_window: 200000
price: {input_per_mtok: 1000.00, output_per_mtok: 0}
directives:
  "b/thrice":
    - tool_calls: [{tool: rye/file-system/fs_read, input: {path: "nothing"}}]
      usage: {input: 1000, output: 0}
    - tool_calls: [{tool: rye/file-system/fs_read, input: {path: "nothing"}}]
      usage: {input: 1000, output: 0}
    - text: "spent three dollars"
      usage: {input: 1000, output: 0}
`

// TestTenantBudgetYieldSaid: through the binary on real Redis, a run of
// three one-dollar turns in a tenant whose day window is 1.50 is lent
// its dollar, then the half left, and spends a second dollar (half of it
// overrun, as tenant show has it); with no room for a third turn it
// yields at the turn boundary and waits: its record (thread show) says
// waiting for tenant_budget, and `thread run --wait` says once, on
// stderr, which window it waits for and how to raise it. tenant set
// raising the window runs it again: the claim clears the wait, and it
// completes.
func TestTenantBudgetYieldSaid(t *testing.T) {
	t.Parallel()
	files := budgetProject()
	files[".ai/directives/b/thrice.md"] = noLimitsDirective("thrice", fsPerms, "")
	files["scripts/thrice.yaml"] = thriceScript
	files[".ai/config/agent/admission.yaml"] = "version: 1\ntenants:\n  acme: {spend_per_day: 1.5, spend_grant: 1}\n"
	e := spooltest.New(t, spooltest.Options{Files: files})
	r := e.Spool("admission", "apply")
	require.Equal(t, 0, r.Code, r.Stderr)
	e.StartWorker("--concurrency", "2")

	run := e.Start(nil, "thread", "run", "b/thrice", "--model", "script:scripts/thrice.yaml", "--limit", "spend=5",
		"--limit", "tokens=10000000", "--tenant", "acme", "--wait", "--json", "--timeout", "3m")
	var id string
	require.Eventually(t, func() bool {
		r := e.Spool("thread", "list", "--tenant", "acme", "--json")
		if r.Code != 0 {
			return false
		}
		listed := listedThreads(t, r)
		if len(listed) != 1 {
			return false
		}
		id = listed[0].ThreadID
		return true
	}, time.Minute, 100*time.Millisecond, "the run is registered")
	waitRecord(t, e, id, "it yields for its tenant's budget after two turns", func(r *registry.Record) bool {
		return r.Status == thread.StatusWaiting && r.WaitingFor == "tenant_budget"
	})
	var shown map[string]any
	r = e.Spool("thread", "show", id, "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	r.JSON(t, &shown)
	require.Equal(t, "waiting", shown["status"])
	require.Equal(t, "tenant_budget", shown["waiting_for"])
	day := tenantShow(t, e, "acme").Spend["day"]
	require.InDelta(t, 1.5, day.Spent, 1e-9, "its allowance, all of the window")
	require.InDelta(t, 0.5, day.Overrun, 1e-9, "the second dollar's half beyond its allowance")
	want := "spool: waiting for tenant acme's spend window (day 1.50 of 1.50 USD spent); raise it with spool tenant set acme --spend-per-day USD\n"
	require.Eventually(t, func() bool { return strings.Contains(run.Log(), want) }, 30*time.Second, 50*time.Millisecond, "%s", run.Log())

	r = e.Spool("tenant", "set", "acme", "--spend-per-day", "5")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Eventually(t, run.Exited, 2*time.Minute, 50*time.Millisecond)
	require.Equal(t, 0, run.Cmd.ProcessState.ExitCode(), run.Log())
	require.Equal(t, 1, strings.Count(run.Log(), "spool: waiting for tenant acme's spend window"), "said once: %s", run.Log())
	r = e.Spool("thread", "show", id, "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var final registry.Record
	r.JSON(t, &final)
	require.Equal(t, thread.StatusCompleted, final.Status)
	require.Empty(t, final.WaitingFor, "the claim that ran it again cleared the wait")
	require.InDelta(t, 3, final.Cost.Spend, 1e-9)
}
