package worker

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// costly is a turn that costs 0.10 USD at the fake provider's prices
// (5 USD per million output tokens).
func costly(text string) reply {
	return reply{resp: &provider.Response{Text: text, Usage: provider.Usage{OutputTokens: 20000}}}
}

// costlyRead is a turn that reads a file and costs 0.10 USD.
func costlyRead() reply {
	r := call("rye/file-system/fs_read", `{"path":"x"}`)
	r.resp.Usage = provider.Usage{OutputTokens: 20000}
	return r
}

// fixedClock is a settable clock for a harness.
type fixedClock struct{ ms atomic.Int64 }

func (c *fixedClock) now() time.Time      { return time.UnixMilli(c.ms.Load()) }
func (c *fixedClock) set(t time.Time)     { c.ms.Store(t.UnixMilli()) }
func (c *fixedClock) add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// share gives the default tenant a fair share of n slots (as a
// balancer's pass would with workers registered).
func (h *harness) share(n int) {
	h.t.Helper()
	_, err := h.o.Admission().Pump(h.ctx, thread.DefaultTenant, admission.PumpArgs{Share: &n})
	require.NoError(h.t, err)
}

// window is the tenant's spend today as tenant show reads it; it checks
// spent + held ≤ limit.
func (h *harness) window(tenant string) (spent, held float64) {
	h.t.Helper()
	st, _, err := h.o.Admission().Status(h.ctx, tenant)
	require.NoError(h.t, err)
	d := st.Spend["day"]
	if d.Limit != nil {
		require.LessOrEqual(h.t, d.Spent+d.Held, *d.Limit+1e-9, "spent + held ≤ limit")
	}
	return d.Spent, d.Held
}

// TestSpendPerDay: runs one after another spend the tenant's daily
// window; when it is full the next waits (tenant_budget, no task), a
// raised ceiling (tenant set) admits it at once, and the next UTC day's
// window admits the one after; spent + held never passes the limit.
func TestSpendPerDay(t *testing.T) {
	t.Parallel()
	clock := &fixedClock{}
	clock.set(time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC))
	h := setupWith(t, nil, harnessConfig{now: clock.now})
	h.publish("version: 1\ntenants:\n  default: {spend_per_day: 0.25, spend_grant: 0.10}\n")
	h.prov.script("h/a", costly("done"))
	for i, want := range []float64{0.10, 0.20, 0.25} {
		id := h.startQueued("h/a")
		require.Equal(t, 1, h.drain(false))
		require.Equal(t, thread.StatusCompleted, h.record(id).Status, "run %d", i)
		spent, held := h.window(thread.DefaultTenant)
		require.InDelta(t, want, spent, 1e-9, "run %d: the third had 0.05 of room: its other 0.05 is overrun", i)
		require.Zero(t, held)
	}
	waiting := h.startQueued("h/a")
	rec := h.record(waiting)
	require.Equal(t, thread.StatusWaiting, rec.Status)
	require.Equal(t, admission.WaitTenantBudget, rec.WaitingFor)
	_, err := h.insp.GetTaskInfo(h.o.Runtime().Services().Keys.Queue(queue.DefaultQueue), waiting)
	require.Error(t, err, "a run waiting for its tenant's budget has no task")

	n, err := h.o.Admission().SetTenant(h.ctx, thread.DefaultTenant, map[string]string{"spend_per_day": "0.5"}, nil)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the raise admits the waiter before it returns")
	require.Equal(t, 1, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(waiting).Status)

	h.startQueued("h/a")
	require.Equal(t, 1, h.drain(false))
	spent, _ := h.window(thread.DefaultTenant)
	require.InDelta(t, 0.45, spent, 1e-9)
	h.startQueued("h/a")
	require.Equal(t, 1, h.drain(false), "0.05 of room: admitted")
	next := h.startQueued("h/a")
	require.Equal(t, admission.WaitTenantBudget, h.record(next).WaitingFor)
	require.Zero(t, h.drain(false))
	// Midnight: the day's window is new; a pump (the balancer's, or the
	// task scheduled for that time) admits the waiter.
	clock.add(time.Hour)
	n, err = h.o.Admission().Pump(h.ctx, thread.DefaultTenant, admission.PumpArgs{})
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, 1, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(next).Status)
	spent, _ = h.window(thread.DefaultTenant)
	require.InDelta(t, 0.10, spent, 1e-9, "today's window holds only today's run")
}

// TestSpendStopsAThread: a thread whose calls outgrow its allowance tops
// it up turn by turn while the window has room; then it stops before its
// next call: under wait it hands back and waits for admission (its
// record waiting, tenant_budget) and goes on when the ceiling is raised,
// under refuse it ends error
// tenant_budget_exhausted.
func TestSpendStopsAThread(t *testing.T) {
	t.Parallel()
	for _, refuse := range []bool{false, true} {
		t.Run(fmt.Sprint("refuse=", refuse), func(t *testing.T) {
			t.Parallel()
			h := setup(t, nil, Config{})
			policy := "version: 1\ntenants:\n  default: {spend_per_day: 0.25, spend_grant: 0.10"
			if refuse {
				policy += ", on_exhausted: refuse"
			}
			h.publish(policy + "}\n")
			h.prov.script("h/a", costlyRead(), costlyRead(), costlyRead(), costly("done"))
			id := h.startQueued("h/a")
			h.drain(false)
			rec := h.record(id)
			spent, held := h.window(thread.DefaultTenant)
			require.InDelta(t, 0.25, spent, 1e-9, "the window's room, and not a cent more")
			require.Zero(t, held)
			require.InDelta(t, 0.30, rec.Cost.Spend, 1e-9, "three calls: the last went past the room by its own cost")
			if refuse {
				require.Equal(t, thread.StatusError, rec.Status)
				require.Equal(t, admission.CodeTenantBudgetExhausted, rec.Error.Code)
				return
			}
			// As a yield does, it released its lease and grant after its
			// last checkpoint; its request waits on the tenant's budget,
			// and its record says so (not running) until its next claim.
			require.Equal(t, 1, atoi(h.tenantState(thread.DefaultTenant)["n:blocked:tenant_budget:default"]))
			require.Equal(t, thread.StatusWaiting, rec.Status)
			require.Equal(t, admission.WaitTenantBudget, rec.WaitingFor)
			_, err := h.o.Admission().SetTenant(h.ctx, thread.DefaultTenant, map[string]string{"spend_per_day": "1"}, nil)
			require.NoError(t, err)
			h.drain(false)
			rec = h.record(id)
			require.Equal(t, thread.StatusCompleted, rec.Status)
			require.Equal(t, "done", rec.Result)
			require.Empty(t, rec.WaitingFor, "its claim cleared the wait")
		})
	}
}

// TestRunsInFlightAndRefusal: a root over runs_in_flight waits
// (tenant_runs) until a root chain ends, whose release admits it; a
// child never counts. Under refuse the root is registered and ended
// error tenant_runs_exceeded, and the start answers the refusal.
func TestRunsInFlightAndRefusal(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.publish("version: 1\ntenants:\n  default: {runs_in_flight: 1}\n")
	h.share(10)
	parent := h.startParentOfKid()
	second := h.startQueued("h/kid")
	require.Equal(t, admission.WaitTenantRuns, h.record(second).WaitingFor)
	require.NoError(t, h.activate(parent, "start", 0))
	h.drain(false)
	require.Equal(t, thread.StatusCompleted, h.record(parent).Status, "its child was admitted though the tenant's one root was in flight")
	require.Equal(t, thread.StatusCompleted, h.record(second).Status, "the end of the first chain admitted it")

	h.publish("version: 1\ntenants:\n  default: {runs_in_flight: 1, on_exhausted: refuse}\n")
	first := h.startQueued("h/kid")
	_, err := h.o.Start(h.ctx, orchestrator.StartRequest{Directive: "h/kid", Bundle: h.bundle, Model: fakeModel})
	var ae *thread.AdmissionError
	require.True(t, errors.As(err, &ae), "%v", err)
	require.Equal(t, admission.CodeTenantRunsExceeded, ae.Code)
	require.NotEmpty(t, ae.Run)
	refused := h.record(ae.Run)
	require.Equal(t, thread.StatusError, refused.Status)
	require.Equal(t, admission.CodeTenantRunsExceeded, refused.Error.Code)
	h.drain(false)
	require.Equal(t, thread.StatusCompleted, h.record(first).Status)
}

// TestLostChainEndRecovered: a root chain whose end's release was lost
// (its worker died after the finalize) would hold a slot of
// runs_in_flight for good; housekeeping finds its run finished, ends the
// chain, and the root waiting for the slot is admitted.
func TestLostChainEndRecovered(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.publish("version: 1\ntenants:\n  default: {runs_in_flight: 1}\n")
	h.share(10)
	h.prov.script("h/a", say("done"))
	first := h.startQueued("h/a")
	require.Equal(t, 1, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(first).Status)
	// The release that ended its chain is lost: the chain is in flight.
	roots := h.o.Runtime().Services().Keys.AdmTenant(thread.DefaultTenant, "roots")
	require.NoError(t, h.o.Runtime().Services().Redis.SAdd(h.ctx, roots, first).Err())
	second := h.startQueued("h/a")
	require.Equal(t, admission.WaitTenantRuns, h.record(second).WaitingFor)
	_, _, err := h.o.Housekeeper().Recover(h.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(second).Status)
	n, err := h.o.Runtime().Services().Redis.SCard(h.ctx, roots).Result()
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestChildRefusedOnFullWindow: under on_exhausted: refuse, a child whose
// start finds its tenant's spend window full is a refused spawn with
// tenant_budget_exhausted (on record, ended error, and in the parent's
// transcript), and the parent goes on.
func TestChildRefusedOnFullWindow(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	// The parent's claim borrows the whole window.
	h.publish("version: 1\ntenants:\n  default: {spend_per_day: 0.10, spend_grant: 0.10, on_exhausted: refuse}\n")
	h.share(10)
	parent := h.startParentOfKid()
	require.NoError(t, h.activate(parent, "start", 0))
	h.drain(false)
	rec := h.record(parent)
	require.Equal(t, thread.StatusCompleted, rec.Status)
	refused := eventsOf[transcript.ChildRefused](h, parent, transcript.TypeChildRefused)
	require.Len(t, refused, 1)
	require.Equal(t, admission.CodeTenantBudgetExhausted, refused[0].Code)
	kids, err := h.o.Runtime().Services().Registry.ListChildren(h.ctx, parent)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	kid := h.record(kids[0].ThreadID)
	require.Equal(t, thread.StatusError, kid.Status)
	require.Equal(t, admission.CodeTenantBudgetExhausted, kid.Error.Code)
}

// TestLapsedSettledByHousekeeping: a run whose activation was reaped
// with an allowance and then ended without another activation (cancelled
// while its worker was gone) has its allowance settled by housekeeping
// from its record: what the thread spent since that claim, once.
func TestLapsedSettledByHousekeeping(t *testing.T) {
	t.Parallel()
	clock := &fixedClock{}
	clock.set(time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC))
	h := setupWith(t, nil, harnessConfig{now: clock.now})
	p := h.publish("version: 1\ntenants:\n  default: {spend_per_day: 1, spend_grant: 0.25}\n")
	id := h.startQueued("h/a")
	rec := h.record(id)
	req := admission.RequestOf(rec, queue.Activation{ThreadID: id, Reason: "start"}, 0, p.Policy)
	adm := h.o.Admission()
	c, err := adm.Claim(h.ctx, req, "tok", 3*time.Second)
	require.NoError(t, err)
	require.Equal(t, admission.ClaimRun, c.Verdict)
	require.Equal(t, int64(250_000_000), c.Allowance)
	sv := h.o.Runtime().Services()
	claim, err := sv.Activations.ClaimAdmitted(h.ctx, id, "start", 0, "tok", id, 3*time.Second, req.Act)
	require.NoError(t, err)
	_, err = sv.Registry.Commit(h.ctx, id, claim.Version, registry.Changes{Cost: &thread.Cost{Turns: 1, Spend: 0.04}})
	require.NoError(t, err)
	// The worker dies; its lease is reaped by the next tenant call.
	clock.add(4 * time.Second)
	_, err = adm.Pump(h.ctx, thread.DefaultTenant, admission.PumpArgs{})
	require.NoError(t, err)
	spent, held := h.window(thread.DefaultTenant)
	require.Equal(t, []float64{0, 0.25}, []float64{spent, held}, "lapsed: held, not spent")
	// Cancelled while nobody ran it: no next activation settles it.
	_, err = sv.Registry.Commit(h.ctx, id, 0, registry.Changes{Status: thread.StatusCancelled})
	require.NoError(t, err)
	for range 2 {
		_, _, err = h.o.Housekeeper().Recover(h.ctx)
		require.NoError(t, err)
	}
	spent, held = h.window(thread.DefaultTenant)
	require.InDelta(t, 0.04, spent, 1e-9, "what it spent, once")
	require.Zero(t, held)
}

// TestChargeToppedUp: a call that costs more than the activation's
// allowance while its window has room is lent the difference before its
// charge, so the window counts all of it spent and none overrun.
func TestChargeToppedUp(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.publish("version: 1\ntenants:\n  default: {spend_per_day: 1, spend_grant: 0.03}\n")
	h.prov.script("h/a", costly("done"))
	id := h.startQueued("h/a")
	require.Equal(t, 1, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(id).Status)
	spent, held := h.window(thread.DefaultTenant)
	require.InDelta(t, 0.10, spent, 1e-9, "the whole call, not the 0.03 lent at the claim")
	require.Zero(t, held)
	day, _ := admission.Windows(time.Now())
	m, err := h.o.Runtime().Services().Redis.HGetAll(h.ctx, h.o.Runtime().Services().Keys.AdmTenant(thread.DefaultTenant, "spend")).Result()
	require.NoError(t, err)
	require.Empty(t, m["d:"+day+":overrun"], "nothing overrun while the window had room")
}

// TestTopUpBorrowsTheCallEstimate: before a model call the activation
// borrows what the call may cost (its prompt and max_tokens at the
// model's prices), so the room is its own while the call runs; what the
// call did not use goes back at the end.
func TestTopUpBorrowsTheCallEstimate(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{MaxOutputTokens: 40000})
	h.publish("version: 1\ntenants:\n  default: {spend_per_day: 1, spend_grant: 0.05}\n")
	var during atomic.Value
	h.prov.script("h/a", reply{fn: func(ctx context.Context, _ *provider.Request) (*provider.Response, error) {
		st, _, err := h.o.Admission().Status(ctx, thread.DefaultTenant)
		if err == nil {
			during.Store(st.Spend["day"].Held)
		}
		return costly("done").resp, nil
	}})
	id := h.startQueued("h/a")
	require.Equal(t, 1, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(id).Status)
	held, _ := during.Load().(float64)
	require.GreaterOrEqual(t, held, 0.20, "max_tokens of output (40000 at 5 USD/Mtok) borrowed before the call, not the 0.05 of the claim")
	spent, heldAfter := h.window(thread.DefaultTenant)
	require.InDelta(t, 0.10, spent, 1e-9)
	require.Zero(t, heldAfter)
}
