package registry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Reconcile raises a thread's transcript mark and version, never lowers
// them, and touches nothing else.
func TestRegistryReconcile(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "a", "")
	_, err := f.reg.Commit(f.ctx, "a", 0, Changes{Transcript: &TranscriptMark{Segments: 2, ChainHash: "h2"}})
	require.NoError(t, err)
	before := f.get(t, "a")

	got, err := f.reg.Reconcile(f.ctx, "a", Reconciliation{Mark: &TranscriptMark{Segments: 5, ChainHash: "h5"}, MinVersion: 1002})
	require.NoError(t, err)
	require.Equal(t, Reconciled{MarkFrom: 2, MarkTo: 5, VersionFrom: before.Version, VersionTo: 1002}, got)
	after := f.get(t, "a")
	require.Equal(t, TranscriptMark{Segments: 5, ChainHash: "h5"}, after.Transcript)
	require.Equal(t, int64(1002), after.Version)
	require.Equal(t, before.Status, after.Status)
	require.Equal(t, before.UpdatedAt, after.UpdatedAt)

	// Lower asks change nothing.
	got, err = f.reg.Reconcile(f.ctx, "a", Reconciliation{Mark: &TranscriptMark{Segments: 3, ChainHash: "h3"}, MinVersion: 7})
	require.NoError(t, err)
	require.False(t, got.MarkRaised())
	require.False(t, got.VersionRaised())
	require.Equal(t, after.Transcript, f.get(t, "a").Transcript)

	_, err = f.reg.Reconcile(f.ctx, "nobody", Reconciliation{MinVersion: 3})
	require.ErrorIs(t, err, ErrNotFound)
}

// A requeue activation claims a created thread, as its start would, and
// nothing else.
func TestRequeueClaimsCreatedThread(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	acts := NewActivations(f.r.Client, f.ks, f.clock.Now)
	f.register(t, "a", "")
	c, err := acts.Claim(f.ctx, "a", "requeue", 123, "tok", "a@requeue-123", time.Minute)
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Activation)
	_, err = acts.Claim(f.ctx, "a", "requeue", 124, "tok2", "a@requeue-124", time.Minute)
	require.ErrorIs(t, err, ErrNotClaimable, "a second requeue of a running thread is dropped")
}
