package registry

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func register(t *testing.T, f regFixture, id, parent string) *Record {
	t.Helper()
	rec, err := f.reg.Register(f.ctx, NewThread{ThreadID: id, Directive: "t/x", ParentID: parent, Limits: thread.DefaultLimits()})
	require.NoError(t, err)
	return rec
}

func TestClaimRules(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	ttl := 5 * time.Second
	register(t, f, "a", "")

	// A wake or recover cannot start a created thread.
	_, err := acts.Claim(f.ctx, "a", "wake", 1, "tok", "a@wake-1", ttl)
	require.ErrorIs(t, err, ErrNotClaimable)
	_, err = acts.Claim(f.ctx, "a", "recover", 1, "tok", "a@recover-1", ttl)
	require.ErrorIs(t, err, ErrNotClaimable)

	c, err := acts.Claim(f.ctx, "a", "start", 0, "tok1", "a", ttl)
	require.NoError(t, err)
	require.Equal(t, int64(2), c.Version)
	require.Equal(t, int64(1), c.Activation)
	require.Equal(t, thread.StatusRunning, c.Record.Status)
	require.False(t, c.Record.StartedAt.IsZero())

	// While the lease lives, nobody else claims, not even the same task.
	_, err = acts.Claim(f.ctx, "a", "start", 0, "tok2", "a", ttl)
	require.ErrorIs(t, err, ErrNotClaimable)
	_, err = acts.Claim(f.ctx, "a", "recover", c.Version, "tok2", "a@recover-2", ttl)
	require.ErrorIs(t, err, ErrNotClaimable)
	require.NoError(t, acts.Heartbeat(f.ctx, "a", "tok1", ttl))

	// Once it lapses, a recover at the version seen takes over; a stale
	// version does not.
	require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Lease("a")).Err())
	orphans, err := acts.Orphans(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []Orphan{{ThreadID: "a", Version: c.Version}}, orphans)
	// Handed back until a retry time, it is no orphan until then.
	retryAt := func(at time.Time) {
		require.NoError(t, f.r.Client.HSet(f.ctx, f.ks.Thread("a"), RetryAtField, at.Format(time.RFC3339Nano)).Err())
	}
	retryAt(f.clock.Now().Add(time.Minute))
	orphans, err = acts.Orphans(f.ctx)
	require.NoError(t, err)
	require.Empty(t, orphans)
	retryAt(f.clock.Now().Add(-time.Second)) // within the grace
	orphans, err = acts.Orphans(f.ctx)
	require.NoError(t, err)
	require.Empty(t, orphans)
	retryAt(f.clock.Now().Add(-time.Minute))
	orphans, err = acts.Orphans(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []Orphan{{ThreadID: "a", Version: c.Version}}, orphans)
	_, err = acts.Claim(f.ctx, "a", "recover", c.Version-1, "tok2", "a@recover-1", ttl)
	require.ErrorIs(t, err, ErrNotClaimable)
	c2, err := acts.Claim(f.ctx, "a", "recover", c.Version, "tok2", "a@recover-2", ttl)
	require.NoError(t, err)
	require.Equal(t, int64(2), c2.Activation)

	// The old holder's heartbeat now fails, and its commits conflict.
	require.ErrorIs(t, acts.Heartbeat(f.ctx, "a", "tok1", ttl), ErrLeaseLost)
	_, err = f.reg.Commit(f.ctx, "a", c.Version, Changes{Cost: &thread.Cost{Turns: 9}})
	require.ErrorIs(t, err, ErrConflict)

	// A finished thread is never claimed again.
	_, err = f.reg.Commit(f.ctx, "a", c2.Version, Changes{Status: thread.StatusCompleted})
	require.NoError(t, err)
	require.NoError(t, acts.Release(f.ctx, "a", "tok2"))
	for _, reason := range []string{"start", "wake", "timeout", "recover"} {
		_, err := acts.Claim(f.ctx, "a", reason, 0, "tok3", "a", ttl)
		require.ErrorIs(t, err, ErrNotClaimable, reason)
	}
	_, err = acts.Claim(f.ctx, "missing", "start", 0, "tok", "missing", ttl)
	require.ErrorIs(t, err, ErrNotFound)
}

// finish moves a running thread to a final status.
func finish(t *testing.T, f regFixture, acts *Activations, id string, status thread.Status) {
	t.Helper()
	c, err := acts.Claim(f.ctx, id, "start", 0, "tok-"+id, id, time.Minute)
	require.NoError(t, err)
	_, err = f.reg.Commit(f.ctx, id, c.Version, Changes{Status: status})
	require.NoError(t, err)
}

func TestSuspendAndWakeExactlyOnce(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	for round := 0; round < 30; round++ {
		p := "p" + string(rune('a'+round%26)) + time.Now().Format("150405.000000")
		register(t, f, p, "")
		c, err := acts.Claim(f.ctx, p, "start", 0, "tok", p, time.Minute)
		require.NoError(t, err)
		kids := []string{p + "-1", p + "-2", p + "-3"}
		var targets []WaitTarget
		for _, k := range kids {
			register(t, f, k, p)
			targets = append(targets, WaitTarget{Root: k, Terminal: k})
		}
		suspended, seq, err := acts.Suspend(f.ctx, p, c.Version, targets)
		require.NoError(t, err)
		require.True(t, suspended)
		rec, err := f.reg.Get(f.ctx, p)
		require.NoError(t, err)
		require.Equal(t, thread.StatusWaiting, rec.Status)

		// The first child finishes alone: nobody wakes.
		finish(t, f, acts, kids[0], thread.StatusCompleted)
		w, err := acts.NotifyFinished(f.ctx, kids[0])
		require.NoError(t, err)
		require.Empty(t, w)

		// The other two finish at the same moment: exactly one wake.
		finish(t, f, acts, kids[1], thread.StatusCompleted)
		finish(t, f, acts, kids[2], thread.StatusError)
		var mu sync.Mutex
		var wakes []Wake
		together(len(kids)-1, func(g int) {
			w, err := acts.NotifyFinished(f.ctx, kids[1+g])
			require.NoError(t, err)
			mu.Lock()
			wakes = append(wakes, w...)
			mu.Unlock()
		})
		require.Equal(t, []Wake{{ThreadID: p, Seq: seq}}, wakes, "round %d", round)

		// The wake claims with the suspension number, once.
		_, err = acts.Claim(f.ctx, p, "wake", seq-1, "tok2", p+"@wake-x", time.Minute)
		require.ErrorIs(t, err, ErrNotClaimable)
		_, err = acts.Claim(f.ctx, p, "wake", seq, "tok2", p+"@wake", time.Minute)
		require.NoError(t, err)
		_, err = acts.Claim(f.ctx, p, "timeout", seq, "tok3", p+"@timeout", time.Minute)
		require.ErrorIs(t, err, ErrNotClaimable, "a timeout after the wake is dropped")
	}
}

func TestSuspendEdgeCases(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	register(t, f, "p", "")
	register(t, f, "done", "p")
	finish(t, f, acts, "done", thread.StatusCompleted)
	c, err := acts.Claim(f.ctx, "p", "start", 0, "tok", "p", time.Minute)
	require.NoError(t, err)

	// Everything waited on has finished: no suspension, same version.
	suspended, v, err := acts.Suspend(f.ctx, "p", c.Version, []WaitTarget{{Root: "done", Terminal: "done"}})
	require.NoError(t, err)
	require.False(t, suspended)
	require.Equal(t, c.Version, v)

	// A stale version conflicts.
	register(t, f, "kid", "p")
	_, _, err = acts.Suspend(f.ctx, "p", c.Version-1, []WaitTarget{{Root: "kid", Terminal: "kid"}})
	require.ErrorIs(t, err, ErrConflict)

	// A chain that moved on is reported, to be resolved again.
	register(t, f, "old", "p")
	register(t, f, "new", "p")
	oc, err := acts.Claim(f.ctx, "old", "start", 0, "tok-old", "old", time.Minute)
	require.NoError(t, err)
	_ = oc
	_, _, err = f.reg.LinkContinuation(f.ctx, "old", "new")
	require.NoError(t, err)
	_, _, err = acts.Suspend(f.ctx, "p", c.Version, []WaitTarget{{Root: "old", Terminal: "old"}})
	require.True(t, errors.Is(err, ErrChainMoved), "%v", err)

	// A waiting thread whose waits emptied with no wake-up is found.
	suspended, seq, err := acts.Suspend(f.ctx, "p", c.Version, []WaitTarget{{Root: "kid", Terminal: "kid"}})
	require.NoError(t, err)
	require.True(t, suspended)
	require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Waits("p")).Err()) // the waker died after emptying it
	stalled, err := acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []Wake{{ThreadID: "p", Seq: seq}}, stalled)
}

// TestStalledWaitsTellsEndedChains: a chain that ended without telling
// its waiter (its finisher died between the end's commit and
// NotifyWaiters, or a failover kept the end and lost the telling) is
// told by housekeeping: StalledWaits takes it out of the waiter's waits
// set, and lists the waiter once the last of its chains has ended so;
// a chain continued into a thread that ended has ended, a running or
// lost one has not; the finisher's own telling, late, wakes nothing twice.
func TestStalledWaitsTellsEndedChains(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := f.acts
	register(t, f, "p", "")
	for _, k := range []string{"kid", "old", "new", "lost"} {
		register(t, f, k, "p")
	}
	_, err := acts.Claim(f.ctx, "old", "start", 0, "tok-old", "old", time.Minute)
	require.NoError(t, err)
	_, _, err = f.reg.LinkContinuation(f.ctx, "old", "new")
	require.NoError(t, err)
	c, err := acts.Claim(f.ctx, "p", "start", 0, "tok", "p", time.Minute)
	require.NoError(t, err)
	suspended, seq, err := acts.Suspend(f.ctx, "p", c.Version, []WaitTarget{{Root: "kid", Terminal: "kid"}, {Root: "old", Terminal: "new"},
		{Root: "lost", Terminal: "lost"}})
	require.NoError(t, err)
	require.True(t, suspended)

	waits := func() []string {
		m, err := f.r.Client.SMembers(f.ctx, f.ks.Waits("p")).Result()
		require.NoError(t, err)
		slices.Sort(m)
		return m
	}
	// kid ends, and its finisher dies before telling p.
	finish(t, f, acts, "kid", thread.StatusCompleted)
	stalled, err := acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Empty(t, stalled, "p still waits on two chains")
	require.Equal(t, []string{"lost", "old"}, waits(), "the ended chain is told")
	in, err := f.r.Client.SIsMember(f.ctx, f.ks.Waiters("kid"), "p").Result()
	require.NoError(t, err)
	require.False(t, in, "p left the ended chain's waiters")

	// The chain old continued into new ends, untold.
	finish(t, f, acts, "new", thread.StatusError)
	stalled, err = acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Empty(t, stalled, "lost has not ended: its record is gone, not final")
	require.Equal(t, []string{"lost"}, waits())

	// lost comes back (restored) and ends, untold: p is due.
	require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Thread("lost")).Err())
	stalled, err = acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Empty(t, stalled)
	register(t, f, "lost", "p")
	finish(t, f, acts, "lost", thread.StatusCancelled)
	stalled, err = acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []Wake{{ThreadID: "p", Seq: seq}}, stalled)
	require.Empty(t, waits())

	// The finisher's own telling comes late: no second wake-up.
	wakes, err := acts.NotifyFinished(f.ctx, "lost")
	require.NoError(t, err)
	require.Empty(t, wakes)
	_, err = acts.Claim(f.ctx, "p", "wake", seq, "tok2", "p@wake", time.Minute)
	require.NoError(t, err)
}

// TestDecideWhileAwake: a thread waiting for approval that a message
// wakes is running, its calls still pending, until it suspends again. A
// decision made in that window is recorded (not refused as "nothing
// pending") without a second wake-up, and the suspension that follows
// counts it: no call open, so the worker wakes the thread itself.
func TestDecideWhileAwake(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	register(t, f, "a", "")
	c, err := acts.Claim(f.ctx, "a", "start", 0, "tok", "a", time.Minute)
	require.NoError(t, err)
	pending := []PendingApproval{{CallID: "c1", Tool: "t/x"}, {CallID: "c2", Tool: "t/x"}}
	seq, open, err := acts.SuspendForApproval(f.ctx, "a", c.Version, pending)
	require.NoError(t, err)
	require.EqualValues(t, 2, open)
	require.NoError(t, acts.Release(f.ctx, "a", "tok"))

	d := Decision{Decision: DecisionApprove, By: "ada", At: f.clock.Now()}
	decided, wake, err := acts.Decide(f.ctx, "a", []string{"c1"}, d)
	require.NoError(t, err)
	require.Equal(t, []string{"c1"}, decided)
	require.Nil(t, wake, "c2 still waits")

	// A message wakes it: running, both calls still in the record.
	c2, err := acts.Claim(f.ctx, "a", "wake", seq, "tok2", "a@wake", time.Minute)
	require.NoError(t, err)
	require.Equal(t, thread.StatusRunning, c2.Record.Status)
	decided, wake, err = acts.Decide(f.ctx, "a", nil, d)
	require.NoError(t, err, "decided while awake")
	require.Equal(t, []string{"c2"}, decided)
	require.Nil(t, wake, "a running thread is not woken")
	_, _, err = acts.Decide(f.ctx, "a", []string{"c2"}, d)
	require.ErrorIs(t, err, ErrNotPending, "a call is decided once")

	_, open, err = acts.SuspendForApproval(f.ctx, "a", c2.Version, pending)
	require.NoError(t, err)
	require.Zero(t, open, "the suspension counts the decisions made while awake")

	// Once the calls are answered and cleared, nothing is pending.
	require.NoError(t, acts.ClearApprovals(f.ctx, "a"))
	_, _, err = acts.Decide(f.ctx, "a", nil, d)
	require.ErrorIs(t, err, ErrNotPending)
}

// TestSuspendAnyWakesOnFirst: a thread suspended with SuspendAny is woken
// by the first of its chains to finish, once however many finish at that
// moment; it does not suspend when one has finished already; and a lost
// wake-up of an any waiter (one chain left, others still running) is found
// by StalledWaits.
func TestSuspendAnyWakesOnFirst(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	register(t, f, "g", "")
	c, err := acts.Claim(f.ctx, "g", "start", 0, "tok", "g", time.Minute)
	require.NoError(t, err)
	kids := []string{"g-1", "g-2", "g-3", "g-4"}
	var targets []WaitTarget
	for _, k := range kids {
		register(t, f, k, "g")
		targets = append(targets, WaitTarget{Root: k, Terminal: k})
	}
	suspended, seq, err := acts.SuspendAny(f.ctx, "g", c.Version, targets)
	require.NoError(t, err)
	require.True(t, suspended)

	// Two finish at the same moment: exactly one wake.
	finish(t, f, acts, kids[0], thread.StatusCompleted)
	finish(t, f, acts, kids[1], thread.StatusError)
	var mu sync.Mutex
	var wakes []Wake
	together(2, func(i int) {
		w, err := acts.NotifyFinished(f.ctx, kids[i])
		require.NoError(t, err)
		mu.Lock()
		wakes = append(wakes, w...)
		mu.Unlock()
	})
	require.Equal(t, []Wake{{ThreadID: "g", Seq: seq}}, wakes)

	c, err = acts.Claim(f.ctx, "g", "wake", seq, "tok2", "g@wake", time.Minute)
	require.NoError(t, err)
	// One of the targets has finished: no suspension.
	suspended, v, err := acts.SuspendAny(f.ctx, "g", c.Version, targets)
	require.NoError(t, err)
	require.False(t, suspended)
	require.Equal(t, c.Version, v)
	rec, err := f.reg.Get(f.ctx, "g")
	require.NoError(t, err)
	require.Equal(t, thread.StatusRunning, rec.Status)

	// The two left: suspended; one ends and its waker dies before waking.
	suspended, seq, err = acts.SuspendAny(f.ctx, "g", c.Version, targets[2:])
	require.NoError(t, err)
	require.True(t, suspended)
	stalled, err := acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Empty(t, stalled, "nothing has finished")
	finish(t, f, acts, kids[2], thread.StatusCompleted)
	require.NoError(t, f.r.Client.SRem(f.ctx, f.ks.Waits("g"), kids[2]).Err())
	stalled, err = acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []Wake{{ThreadID: "g", Seq: seq}}, stalled)
}

// TestClaimAdmittedCountsTheOneBefore: an admitted claim notes its
// admission id and the thread's spend; the next admitted claim returns
// that activation with what it spent since (even when its lease was
// lost mid-turn), and keeps it on the record for housekeeping; a claim
// without admission notes nothing.
func TestClaimAdmittedCountsTheOneBefore(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	ttl := 5 * time.Second
	register(t, f, "a", "")
	c, err := acts.ClaimAdmitted(f.ctx, "a", "start", 0, "tok1", "a", ttl, "a")
	require.NoError(t, err)
	require.Equal(t, "", c.Before)
	require.Equal(t, int64(-1), c.BeforeSpent)
	_, err = f.reg.Commit(f.ctx, "a", c.Version, Changes{Cost: &thread.Cost{Turns: 2, Spend: 0.3}})
	require.NoError(t, err)
	// Its worker dies; the recovery claims at the version it left.
	require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Lease("a")).Err())
	rec, err := f.reg.Get(f.ctx, "a")
	require.NoError(t, err)
	c2, err := acts.ClaimAdmitted(f.ctx, "a", "recover", rec.Version, "tok2", "a@recover-3", ttl, "a@recover-3")
	require.NoError(t, err)
	require.Equal(t, "a", c2.Before)
	require.Equal(t, int64(300_000_000), c2.BeforeSpent)
	require.Equal(t, "a=300000000", c2.Record.Extra["allow_prev"])
	require.Equal(t, "a@recover-3", c2.Record.Extra["allow_act"])
	_, err = f.reg.Commit(f.ctx, "a", c2.Version, Changes{Cost: &thread.Cost{Turns: 3, Spend: 0.45}})
	require.NoError(t, err)
	require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Lease("a")).Err())
	rec, err = f.reg.Get(f.ctx, "a")
	require.NoError(t, err)
	c3, err := acts.ClaimAdmitted(f.ctx, "a", "recover", rec.Version, "tok3", "a@recover-5", ttl, "a@recover-5")
	require.NoError(t, err)
	require.Equal(t, "a@recover-3", c3.Before)
	require.Equal(t, int64(150_000_000), c3.BeforeSpent)
	require.Equal(t, "a@recover-3=150000000;a=300000000", c3.Record.Extra["allow_prev"], "newest first, the older kept")
	require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Lease("a")).Err())
	rec, err = f.reg.Get(f.ctx, "a")
	require.NoError(t, err)
	c4, err := acts.Claim(f.ctx, "a", "recover", rec.Version, "tok4", "a@recover-7", ttl)
	require.NoError(t, err)
	require.Equal(t, "", c4.Before, "a claim without admission")
	require.Equal(t, "a@recover-5", c4.Record.Extra["allow_act"], "left as it was")
}
