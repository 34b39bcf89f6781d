package registry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestStalledWaitsLeavesASleepToItsWake: a run suspended at a sleep node
// until its wake_at is no lost wake before then (its delayed activation
// is due at wake_at), and is one once wake_at and the grace have passed
// (the activation was never scheduled), so housekeeping wakes it once,
// at its time, and never early.
func TestStalledWaitsLeavesASleepToItsWake(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "s", "")
	rec := f.claim(t, "s")
	wake := f.clock.Now().Add(time.Hour)
	seq, err := f.acts.SuspendUntil(f.ctx, "s", rec.Version, WaitingForSleep, wake)
	require.NoError(t, err)
	got, err := f.reg.Get(f.ctx, "s")
	require.NoError(t, err)
	require.Equal(t, WaitingForSleep, got.WaitingFor)

	for _, at := range []time.Time{f.clock.Now(), wake.Add(-time.Second), wake.Add(retryGrace / 2)} {
		f.clock.Set(at)
		stalled, err := f.acts.StalledWaits(f.ctx)
		require.NoError(t, err)
		require.Empty(t, stalled, "at %s the sleep's own wake is still due", at)
	}
	f.clock.Set(wake.Add(retryGrace + time.Second))
	stalled, err := f.acts.StalledWaits(f.ctx)
	require.NoError(t, err)
	require.Equal(t, []Wake{{ThreadID: "s", Seq: seq}}, stalled)
}
