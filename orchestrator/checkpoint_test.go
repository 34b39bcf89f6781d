package orchestrator

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestCheckpointInOneScript: a turn's checkpoint commit, its charge and
// the lease's renewal are one script: at a stale
// version nothing of it happens; at the held version all of it, and the
// charge once however often it is run; a charge that does not fit is
// clamped and reported, and a refused one leaves the commit standing.
func TestCheckpointInOneScript(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t)
	const id = "t/checkpoint-1"
	rec, v, _ := s.runThread(t, id, 1)
	lease := s.holdLease(t, id, "tok", time.Second)
	cp := Checkpoint{Charge: &Charge{Key: id + ":turn:2", Amount: 0.25}, Lease: "tok", LeaseTTL: time.Minute}
	cost := thread.Cost{Turns: 2, Spend: 0.25}
	ch := registry.Changes{Cost: &cost}

	// A stale version: a conflict, and nothing changed.
	_, err := s.o.Runtime().Checkpoint(s.ctx, rec, v-1, ch, cp)
	require.ErrorIs(t, err, registry.ErrConflict)
	e, err := s.o.ledger.Get(s.ctx, id)
	require.NoError(t, err)
	require.Zero(t, e.Own, "no charge at a stale version")
	require.LessOrEqual(t, s.r.Client.PTTL(s.ctx, lease).Val(), time.Second, "the lease is not renewed")

	// The held version: all of it.
	got, err := s.o.Runtime().Checkpoint(s.ctx, rec, v, ch, cp)
	require.NoError(t, err)
	require.Equal(t, v+1, got.Version)
	require.NoError(t, got.ChargeErr)
	require.InDelta(t, 0.25, got.Charged.Own, 1e-9)
	require.True(t, got.LeaseHeld)
	require.Greater(t, s.r.Client.PTTL(s.ctx, lease).Val(), time.Second, "the lease is renewed")
	cur, err := s.o.reg.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, v+1, cur.Version)
	require.Equal(t, 2, cur.Cost.Turns)

	// Again at the new version: the charge under the same key is the
	// first one's. Another token's lease is neither renewed nor held.
	s.holdLease(t, id, "other", time.Second)
	got, err = s.o.Runtime().Checkpoint(s.ctx, rec, v+1, ch, cp)
	require.NoError(t, err)
	require.NoError(t, got.ChargeErr)
	require.False(t, got.LeaseHeld)
	e, err = s.o.ledger.Get(s.ctx, id)
	require.NoError(t, err)
	require.InDelta(t, 0.25, e.Own, 1e-9, "charged once")

	// A charge that does not fit is clamped and reported.
	got, err = s.o.Runtime().Checkpoint(s.ctx, rec, v+2, ch, Checkpoint{Charge: &Charge{Key: id + ":turn:3", Amount: 5}})
	require.NoError(t, err)
	var le *thread.LimitError
	require.ErrorAs(t, got.ChargeErr, &le)
	require.Equal(t, thread.CodeSpendExceeded, le.Code)
	require.True(t, got.LeaseHeld, "no lease given")

	// A refused charge (no ledger entry) leaves the commit standing, and
	// says which version it made.
	require.NoError(t, s.r.Client.Del(s.ctx, s.o.keys.Ledger(id)).Err())
	got, err = s.o.Runtime().Checkpoint(s.ctx, rec, v+3, ch, Checkpoint{Charge: &Charge{Key: id + ":turn:4", Amount: 0.1}})
	require.NoError(t, err)
	require.ErrorIs(t, got.ChargeErr, ledger.ErrNotFound)
	require.Equal(t, v+4, got.Version)
	cur, err = s.o.reg.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, v+4, cur.Version)

	// Without a charge (the script without ledger.lua).
	got, err = s.o.Runtime().Checkpoint(s.ctx, rec, v+4, ch, Checkpoint{})
	require.NoError(t, err)
	require.Equal(t, v+5, got.Version)
	require.NoError(t, got.ChargeErr)
}
