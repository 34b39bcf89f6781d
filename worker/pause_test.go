package worker

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// pauseDuring is a model turn that asks for a pause of id while the call
// is in flight, then answers with tool call (a turn the pause does not
// cut short: the thread pauses before the next one).
func (h *harness) pauseDuring(id *string, tree bool, then reply) reply {
	return reply{fn: func(ctx context.Context, req *provider.Request) (*provider.Response, error) {
		_, err := h.o.Pause(h.ctx, *id, tree)
		require.NoError(h.t, err)
		out := *then.resp
		return &out, nil
	}}
}

// TestPauseMidTurn: a pause asked during a turn lets the turn finish and
// checkpoint, then the thread pauses before the next model call: paused,
// no activation queued, no slot, its spend the first turn's; unpaused,
// it goes on at its next turn and completes, the ledger exact. The time
// it was paused does not count against its duration limit.
func TestPauseMidTurn(t *testing.T) {
	h := setup(t, nil, Config{})
	var id string
	h.prov.script("h/a", h.pauseDuring(&id, false, call("rye/file-system/write", `{"path":"a.txt","content":"one"}`)), say("done"))
	one := 1.0
	id = h.start("h/a", thread.Limits{Duration: &one})
	require.NoError(t, h.activate(id, "start", 0))

	rec := h.record(id)
	require.Equal(t, thread.StatusPaused, rec.Status)
	require.True(t, rec.PauseRequested)
	require.Equal(t, 1, h.prov.calls, "one model call: the pause comes before the second")
	require.Equal(t, 0, h.drain(true), "a paused thread has no activation queued")
	held, err := h.o.Housekeeper().LeaseHeld(h.ctx, id)
	require.NoError(t, err)
	require.False(t, held)
	spent := rec.Cost.Spend
	require.Positive(t, spent)

	// Unpausing a paused run twice, or pausing it again, changes nothing.
	res, err := h.o.Pause(h.ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, thread.StatusPaused, res.Status)
	require.Equal(t, 1, res.Paused)

	time.Sleep(1200 * time.Millisecond) // past its duration limit, paused
	res, err = h.o.Unpause(h.ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, thread.StatusWaiting, res.Status)
	require.Equal(t, 1, res.Runs)
	require.Equal(t, 1, h.drain(false), "the unpause wakes it")
	rec = h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "done", rec.Result)
	require.False(t, rec.PauseRequested)
	require.GreaterOrEqual(t, rec.PausedMS, int64(1000), "the pause is not counted against its duration")
	require.Equal(t, 2, h.prov.calls)
	require.Greater(t, rec.Cost.Spend, spent)
	e, err := h.o.LedgerEntry(h.ctx, id)
	require.NoError(t, err)
	require.InDelta(t, rec.Cost.Spend, e.Actual, 1e-12, "the ledger holds what the turns spent, once")

	_, err = h.o.Unpause(h.ctx, id, false)
	require.Error(t, err, "a finished run cannot be unpaused")
}

// TestPauseWaitingOnChildren: a parent waiting on its child is paused at
// once; the child, not started yet, pauses at its first boundary (before
// any model call); the child's end while its parent is paused does not
// wake the parent; unpausing the tree lets both go on to completion.
func TestPauseWaitingOnChildren(t *testing.T) {
	h := setup(t, nil, Config{})
	id := h.startParentOfKid()
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, thread.StatusWaiting, h.record(id).Status)

	res, err := h.o.Pause(h.ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, thread.StatusPaused, res.Status)
	require.Equal(t, 2, res.Runs, "the parent and its child")
	require.Equal(t, 1, res.Paused, "the child pauses when claimed")
	rec := h.record(id)
	require.Equal(t, registry.WaitingForChildren, rec.Extra[registry.PausedFromField])

	calls := h.prov.calls
	require.Equal(t, 1, h.drain(false), "the child's start claims it, and it pauses")
	kids, err := h.o.Children(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	kid := kids[0].ThreadID
	require.Equal(t, thread.StatusPaused, h.record(kid).Status)
	require.Equal(t, calls, h.prov.calls, "a paused child made no model call")

	// Unpause only the child: it runs to its end, and its end does not
	// wake its paused parent.
	_, err = h.o.Unpause(h.ctx, kid, false)
	require.NoError(t, err)
	require.Equal(t, 1, h.drain(false))
	require.Equal(t, thread.StatusCompleted, h.record(kid).Status)
	require.Equal(t, thread.StatusPaused, h.record(id).Status)
	require.Equal(t, 0, h.drain(true))

	// Unpausing the tree (named by the child) wakes the parent: what it
	// waited for came while it was paused.
	res, err = h.o.Unpause(h.ctx, kid, true)
	require.NoError(t, err)
	require.Equal(t, id, res.ThreadID)
	require.Equal(t, 1, h.drain(false))
	rec = h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "parent done", rec.Result)
	e, err := h.o.LedgerEntry(h.ctx, id)
	require.NoError(t, err)
	require.InDelta(t, rec.Cost.Spend+h.record(kid).Cost.Spend, e.Actual, 1e-12)
}

// TestPauseBeforeSuspend: a pause asked during the turn that spawns a
// child and waits on it applies at the suspension (status paused, not
// waiting); the child, registered after the request, inherits it.
func TestPauseBeforeSuspend(t *testing.T) {
	h := setup(t, nil, Config{})
	var id string
	h.prov.script("h/a", h.pauseDuring(&id, false, call("rye/agent/threads/thread_directive", `{"directive_name":"h/kid"}`)), say("parent done"))
	h.prov.script("h/kid", say("kid done"))
	id = h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	rec := h.record(id)
	require.Equal(t, thread.StatusPaused, rec.Status)
	require.Equal(t, registry.WaitingForChildren, rec.Extra[registry.PausedFromField])
	kids, err := h.o.Children(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	require.True(t, kids[0].PauseRequested, "a child spawned after the request inherits it")
	require.Equal(t, 1, h.drain(false))
	require.Equal(t, thread.StatusPaused, h.record(kids[0].ThreadID).Status)

	res, err := h.o.Unpause(h.ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, 2, res.Runs)
	require.Equal(t, 2, h.drain(false), "the child goes on, then its end wakes the parent")
	require.Equal(t, thread.StatusCompleted, h.record(id).Status)
}

// TestUnpauseWakeLost: a process that unpaused a run and died before it
// enqueued the wake-up loses nothing: housekeeping finds the wake-up due
// (waiting_for unpaused) and the run goes on, once.
func TestUnpauseWakeLost(t *testing.T) {
	h := setup(t, nil, Config{})
	h.prov.script("h/a", call("rye/file-system/write", `{"path":"a.txt","content":"one"}`), say("done"))
	id := h.start("h/a", thread.Limits{})
	_, err := h.o.Pause(h.ctx, id, false)
	require.NoError(t, err)
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, thread.StatusPaused, h.record(id).Status, "a run paused before its start pauses at its first boundary")
	require.Equal(t, 0, h.prov.calls)

	// The unpause's own step, and no enqueue: its process died.
	st, seq, err := h.o.Runtime().Services().Registry.Unpause(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, thread.StatusWaiting, st)
	require.Positive(t, seq)
	require.Equal(t, registry.WaitingForUnpause, h.record(id).WaitingFor)
	require.Equal(t, 0, h.drain(true))

	_, wakes, err := h.o.Housekeeper().Recover(h.ctx)
	require.NoError(t, err)
	require.Equal(t, 1, wakes)
	require.Equal(t, 1, h.drain(false))
	rec := h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, 2, h.prov.calls, "each turn once")
	_, wakes, err = h.o.Housekeeper().Recover(h.ctx)
	require.NoError(t, err)
	require.Zero(t, wakes)
}

// TestCancelPaused: a paused run can be cancelled; the cancel reaches its
// paused child, and nothing of the tree runs again.
func TestCancelPaused(t *testing.T) {
	h := setup(t, nil, Config{})
	id := h.startParentOfKid()
	require.NoError(t, h.activate(id, "start", 0))
	_, err := h.o.Pause(h.ctx, id, false)
	require.NoError(t, err)
	require.Equal(t, 1, h.drain(false))
	kids, err := h.o.Children(h.ctx, id)
	require.NoError(t, err)
	require.Equal(t, thread.StatusPaused, h.record(kids[0].ThreadID).Status)

	_, err = h.o.Cancel(h.ctx, id, true)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCancelled, h.record(id).Status)
	require.Equal(t, thread.StatusCancelled, h.record(kids[0].ThreadID).Status)
	h.drain(true)
	require.Equal(t, thread.StatusCancelled, h.record(id).Status)
	_, err = h.o.Pause(h.ctx, id, false)
	require.Error(t, err, "a finished run cannot be paused")
}
