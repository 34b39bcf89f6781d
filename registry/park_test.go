package registry

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestParkedStartIsClaimedByItsActivation: a root admission parked
// before it ran is waiting (created → waiting), listed by ParkedThreads
// and not by StalledWaits, claimable by the parked activation's task
// (an epoch-suffixed one too) and by no other; the claim clears the mark.
// A park never overwrites a thread that moved on.
func TestParkedStartIsClaimedByItsActivation(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	rec := register(t, f, "a", "")
	ok, err := acts.Park(f.ctx, "a", rec.Version+1, "a", "acme", "concurrency")
	require.NoError(t, err)
	require.False(t, ok, "a stale version parks nothing")
	ok, err = acts.Park(f.ctx, "a", rec.Version, "a", "acme", "concurrency")
	require.NoError(t, err)
	require.True(t, ok)
	got, err := f.reg.Get(f.ctx, "a")
	require.NoError(t, err)
	require.Equal(t, thread.StatusWaiting, got.Status)
	require.Equal(t, "concurrency", got.WaitingFor)

	parked, err := acts.ParkedThreads(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []Parked{{ThreadID: "a", Act: "a", Tenant: "acme", WaitingFor: "concurrency", Version: rec.Version}}, parked)
	stalled, err := acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Empty(t, stalled, "a parked thread is no lost wake-up")

	_, err = acts.Claim(f.ctx, "a", "wake", 0, "tok", "a@wake-0", 5*time.Second)
	require.ErrorIs(t, err, ErrNotClaimable)
	c, err := acts.Claim(f.ctx, "a", "start", 0, "tok", "a~2", 5*time.Second)
	require.NoError(t, err, "the parked activation's task, whatever its epoch")
	require.Equal(t, thread.StatusRunning, c.Record.Status)
	require.Empty(t, c.Record.WaitingFor)
	require.NotContains(t, c.Record.Extra, AdmActField)

	ok, err = acts.Park(f.ctx, "a", c.Version, "a", "acme", "capacity")
	require.NoError(t, err)
	require.False(t, ok, "a running thread is never parked")
}

// TestYieldedRecoveryParks: an activation that released its lease at a
// turn boundary (a yield) and whose recovery at that version admission
// parked leaves its thread waiting with what it waits for
// (tenant_budget), not running; the recovery's claim runs it again and
// clears the wait. Only that recovery parks a running thread, and only
// while no activation holds it.
func TestYieldedRecoveryParks(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	register(t, f, "a", "")
	c, err := acts.Claim(f.ctx, "a", "start", 0, "tok", "a", 5*time.Second)
	require.NoError(t, err)
	act := fmt.Sprintf("a@recover-%d", c.Version)
	ok, err := acts.Park(f.ctx, "a", c.Version, act, "acme", "tenant_budget")
	require.NoError(t, err)
	require.False(t, ok, "an activation holds it: never parked")
	require.NoError(t, acts.Release(f.ctx, "a", "tok"))
	ok, err = acts.Park(f.ctx, "a", c.Version, fmt.Sprintf("a@wake-%d", c.Version), "acme", "tenant_budget")
	require.NoError(t, err)
	require.False(t, ok, "only its recovery parks a running thread")
	ok, err = acts.Park(f.ctx, "a", c.Version, act, "acme", "tenant_budget")
	require.NoError(t, err)
	require.True(t, ok)
	got, err := f.reg.Get(f.ctx, "a")
	require.NoError(t, err)
	require.Equal(t, thread.StatusWaiting, got.Status)
	require.Equal(t, "tenant_budget", got.WaitingFor)
	parked, err := acts.ParkedThreads(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []Parked{{ThreadID: "a", Act: act, Tenant: "acme", WaitingFor: "tenant_budget", Version: c.Version}}, parked)

	again, err := acts.Claim(f.ctx, "a", "recover", c.Version, "tok2", act, 5*time.Second)
	require.NoError(t, err, "the parked recovery claims it")
	require.Equal(t, thread.StatusRunning, again.Record.Status)
	require.Empty(t, again.Record.WaitingFor)
	require.NotContains(t, again.Record.Extra, AdmActField)
}

// TestParkedRecoveryClaimedAfterVersionRaised: reconciliation raises the
// version of a thread whose recovery admission parked (Redis lost commits
// its transcript holds); the parked recovery, named by its seq of
// before, still claims it, and nothing else does. Without it the grant
// of the parked recovery was dropped at every claim and the run waited
// for good.
func TestParkedRecoveryClaimedAfterVersionRaised(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	register(t, f, "a", "")
	c, err := acts.Claim(f.ctx, "a", "start", 0, "tok", "a", 5*time.Second)
	require.NoError(t, err)
	require.NoError(t, acts.Release(f.ctx, "a", "tok"))
	act := fmt.Sprintf("a@recover-%d", c.Version)
	ok, err := acts.Park(f.ctx, "a", c.Version, act, "acme", "capacity")
	require.NoError(t, err)
	require.True(t, ok)
	raised := c.Version + 1000
	_, err = f.reg.Reconcile(f.ctx, "a", Reconciliation{MinVersion: raised})
	require.NoError(t, err)

	_, err = acts.Claim(f.ctx, "a", "recover", raised, "tok2", fmt.Sprintf("a@recover-%d", raised), 5*time.Second)
	require.Error(t, err, "a recovery that is not the parked one does not claim a parked thread")
	again, err := acts.Claim(f.ctx, "a", "recover", c.Version, "tok3", act, 5*time.Second)
	require.NoError(t, err, "the parked recovery claims it at the raised version")
	require.Equal(t, raised+1, again.Version)
	require.Equal(t, thread.StatusRunning, again.Record.Status)
	_, err = acts.Claim(f.ctx, "a", "recover", c.Version, "tok4", act, 5*time.Second)
	require.Error(t, err, "once")
}
