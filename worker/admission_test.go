package worker

import (
	"strconv"
	"testing"
	"time"

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
	sv := h.o.Services()
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
	m, err := h.o.Services().Redis.HGetAll(h.ctx, h.o.Services().Keys.AdmTenant(tenant, "state")).Result()
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
		_, err := h.insp.GetTaskInfo(h.o.Services().Keys.Queue(queue.DefaultQueue), id)
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
	held, err := h.o.Services().Redis.HLen(h.ctx, h.o.Services().Keys.AdmTenant(thread.DefaultTenant, "kheld")).Result()
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
