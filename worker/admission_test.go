package worker

import (
	"strconv"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
)

// publish publishes policy (YAML) for h's namespace and makes it the
// orchestrator's in force at once.
func (h *harness) publish(policy string) *admission.Published {
	h.t.Helper()
	pol, err := admission.Parse("admission.yaml", []byte(policy))
	require.NoError(h.t, err)
	sv := h.o.Runtime().Services()
	p, _, err := admission.Publish(h.ctx, sv.Redis, sv.Keys, pol, "admission.yaml", time.Now())
	require.NoError(h.t, err)
	h.o.Admission().Watcher().Set(p)
	return p
}

// startQueued starts a run and leaves its start task (if admission
// granted one) queued.
func (h *harness) startQueued(dir string) string {
	h.t.Helper()
	rec, err := h.o.Start(h.ctx, orchestrator.StartRequest{Directive: dir, Bundle: h.bundle, Model: fakeModel})
	require.NoError(h.t, err)
	return rec.ThreadID
}

// tenantState is the tenant's admission state hash.
func (h *harness) tenantState(tenant string) map[string]string {
	h.t.Helper()
	m, err := h.o.Runtime().Services().Redis.HGetAll(h.ctx, h.o.Runtime().Services().Keys.AdmTenant(tenant, "state")).Result()
	require.NoError(h.t, err)
	return m
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// TestAdmitThenEnqueue: under a policy, a run whose key is full is not
// enqueued: it waits (status waiting, waiting_for concurrency, the key),
// holding no task; each end frees the key and enqueues the next, so all
// run, one at a time, and every grant is released.
func TestAdmitThenEnqueue(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.publish("version: 1\nconcurrency:\n  - {name: per_dir, directives: ['h/*'], key: '${name}', max: 1}\n")
	h.prov.script("h/a", say("done"))
	ids := []string{h.startQueued("h/a"), h.startQueued("h/a"), h.startQueued("h/a")}
	first := h.record(ids[0])
	require.Equal(t, thread.StatusCreated, first.Status)
	require.Equal(t, []string{"h/a"}, []string{first.ConcurrencyKeys[0].Value})
	for _, id := range ids[1:] {
		rec := h.record(id)
		require.Equal(t, thread.StatusWaiting, rec.Status)
		require.Equal(t, admission.WaitConcurrency, rec.WaitingFor)
		_, err := h.insp.GetTaskInfo(h.o.Runtime().Services().Keys.Queue(queue.DefaultQueue), id)
		require.Error(t, err, "a parked run has no task")
	}
	w, ok, err := h.o.Admission().Where(h.ctx, thread.DefaultTenant, ids[2])
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, admission.Where{State: admission.StateKey, WaitingFor: admission.WaitConcurrency, WaitKey: "per_dir=h/a",
		Position: 2, Since: w.Since, KeyRunning: 1, KeyMax: 1}, w)

	require.Equal(t, 3, h.drain(false))
	for _, id := range ids {
		require.Equal(t, thread.StatusCompleted, h.record(id).Status)
	}
	st := h.tenantState(thread.DefaultTenant)
	require.Equal(t, 3, atoi(st["grants"]))
	require.Equal(t, 3, atoi(st["released"]))
	require.Equal(t, 0, atoi(st["admitted"]))
	held, err := h.o.Runtime().Services().Redis.HLen(h.ctx, h.o.Runtime().Services().Keys.AdmTenant(thread.DefaultTenant, "kheld")).Result()
	require.NoError(t, err)
	require.Zero(t, held)
}

// TestCancelWhileParked: cancelling a run that waits for admission ends it
// and removes its request: the key's next waiter is not held behind it.
func TestCancelWhileParked(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.publish("version: 1\nconcurrency:\n  - {name: per_dir, directives: ['h/*'], key: '${name}', max: 1}\n")
	h.prov.script("h/a", say("done"))
	ids := []string{h.startQueued("h/a"), h.startQueued("h/a"), h.startQueued("h/a")}
	rec, err := h.o.Cancel(h.ctx, ids[1], true)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCancelled, rec.Status)
	_, ok, err := h.o.Admission().Where(h.ctx, thread.DefaultTenant, ids[1])
	require.NoError(t, err)
	require.False(t, ok, "its request is gone")
	require.Equal(t, 2, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(ids[2]).Status)
}

// TestParkedAtClaim: a task that reaches the worker without a grant (a
// delayed one) is admitted at its claim; with no room it is acknowledged
// and parked, and the grant that frees a slot enqueues it under a new
// task id.
func TestParkedAtClaim(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	h.publish("version: 1\nconcurrency:\n  - {name: per_dir, directives: ['h/*'], key: '${name}', max: 1}\n")
	h.prov.script("h/a", say("done"))
	a := h.startQueued("h/a")
	// A second run whose start task arrives without a grant (as one
	// enqueued while admission was off would).
	b := h.startQueued("h/a")
	require.Equal(t, thread.StatusWaiting, h.record(b).Status)
	_, _, err := h.o.Admission().Where(h.ctx, thread.DefaultTenant, b)
	require.NoError(t, err)
	require.NoError(t, h.activate(b, "start", 0), "parked at its claim: acknowledged")
	require.Equal(t, thread.StatusWaiting, h.record(b).Status)
	require.Equal(t, 2, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(a).Status)
	require.Equal(t, thread.StatusCompleted, h.record(b).Status)
}

// runQueued takes id's queued task off its queue and runs it, as a
// worker would; it returns the handler's error.
func (h *harness) runQueued(id string) error {
	h.t.Helper()
	q := h.o.Runtime().Services().Keys.Queue(queue.DefaultQueue)
	ti, err := h.insp.GetTaskInfo(q, id)
	require.NoError(h.t, err)
	require.NoError(h.t, h.insp.DeleteTask(q, id))
	return h.w.handle(h.ctx, asynq.NewTask(ti.Type, ti.Payload))
}

// TestUnrenewedGrantStops (I1): a worker whose renewals do not reach
// Redis stops its activation, tool and all, a third of a lease before
// its grant could expire, so nothing of it runs once another activation
// may be granted the slot; it hands its thread back for a retry. With
// renewals, the same activation runs on past its lease until something
// else ends it.
func TestUnrenewedGrantStops(t *testing.T) {
	t.Parallel()
	const policy = "version: 1\nconcurrency:\n  - {name: per_dir, directives: ['h/*'], key: '${name}', max: 1}\n"
	t.Run("unrenewed", func(t *testing.T) {
		t.Parallel()
		h := setupWith(t, nil, harnessConfig{noRenew: true})
		h.publish(policy + "tenants:\n  default: {spend_per_day: 10}\n")
		h.prov.script("h/a", call("t/sleep", `{}`), say("never"))
		id := h.startQueued("h/a")
		began := time.Now()
		err := h.runQueued(id)
		took := time.Since(began)
		require.ErrorIs(t, err, errGrantLost)
		ttl := h.o.Runtime().Services().LeaseTTL
		require.GreaterOrEqual(t, took, ttl-stopMargin(ttl)-100*time.Millisecond, "stopped before its renewals were due to have failed")
		// Its 30 s tool did not run to its end (a bound far from the
		// stop, for a loaded machine).
		require.Less(t, took, 10*time.Second, "the unrenewed activation ran on")
		rec := h.record(id)
		require.Equal(t, thread.StatusRunning, rec.Status, "handed back for its retry")
		st := h.tenantState(thread.DefaultTenant)
		require.Equal(t, 1, atoi(st["released"]), "its grant released at its end")
		require.Equal(t, 0, atoi(st["admitted"]))
		// Its turn's model call was made but its checkpoint never
		// landed: the run that does it again is charged for it, so its
		// window counts what the thread's record says, not the call.
		spent, held := h.window(thread.DefaultTenant)
		require.Equal(t, []float64{rec.Cost.Spend, 0}, []float64{spent, held}, "the window counts the durable spend")
	})
	t.Run("renewed", func(t *testing.T) {
		t.Parallel()
		h := setup(t, nil, Config{})
		h.publish(policy)
		h.prov.script("h/a", call("t/sleep", `{}`), say("never"))
		id := h.startQueued("h/a")
		done := make(chan error, 1)
		go func() { done <- h.runQueued(id) }()
		ttl := h.o.Runtime().Services().LeaseTTL
		select {
		case err := <-done:
			t.Fatalf("the renewed activation stopped after less than 1.5 leases: %v", err)
		case <-time.After(ttl + ttl/2):
		}
		require.NoError(t, h.o.Runtime().Services().Registry.RequestCancel(h.ctx, id, true))
		h.w.deliver(id, "cancel")
		require.NoError(t, <-done)
		require.Equal(t, thread.StatusCancelled, h.record(id).Status)
	})
}
