package registry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestRestoreWholeRecord: a record restored (a thread Redis lost, given
// back by the blob store) reads back field for field, with its ancestors
// and depth derived from its parent's record, in its parent's children,
// the threads index and, unfinished, the active set. Restoring a thread
// that is registered, or under a parent that is not, is refused before
// anything is written.
func TestRestoreWholeRecord(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	parent, err := f.reg.Register(f.ctx, NewThread{ThreadID: "t/root-1", Directive: "t/root", Limits: thread.DefaultLimits(), Tenant: "acme", Priority: 2})
	require.NoError(t, err)
	at := time.Date(2026, 2, 17, 9, 58, 1, 123456789, time.UTC)
	cost := thread.Cost{Turns: 2, InputTokens: 300, OutputTokens: 20, Spend: 0.0123}
	want := &Record{
		ThreadID: "t/kid-1", Directive: "t/kid", Status: thread.StatusCompleted, ParentID: parent.ThreadID, ChainRootID: "t/kid-1",
		Result: "done", Outputs: map[string]any{"n": float64(3)}, Error: &ErrorInfo{Code: "x", Message: "y"}, Cost: cost,
		Limits: thread.DefaultLimits(), Model: "m", Capabilities: []string{"rye.execute.tool.a"}, Bundle: "sha",
		Inputs: map[string]any{"city": "Lyon"}, Queue: "q", Ancestors: []string{"t/ignored"}, Depth: 7,
		DroppedCapabilities: []string{"rye.execute.tool.b"}, LedgerPath: []string{parent.ThreadID},
		CreatedAt: at, UpdatedAt: at.Add(time.Minute), StartedAt: at.Add(time.Second), Version: 1007, Activation: 3,
		ContinuationKind: "handoff", ModelOverride: "mo", TraceParent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		TraceCaller: "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01",
		Transcript:  TranscriptMark{Segments: 4, ChainHash: "abc"}, Workspace: "w", Kind: KindThread,
		Extra:  map[string]string{RestoredField: at.Format(time.RFC3339Nano)},
		Tenant: "acme", Priority: 2, IdempotencyKey: "k-1", ConcurrencyKeys: []ConcurrencyKey{{Rule: "per_customer", Value: "c1"}},
	}
	got, err := f.reg.Restore(f.ctx, want)
	require.NoError(t, err)
	require.Equal(t, []string{parent.ThreadID}, got.Ancestors, "from the parent's record")
	require.Equal(t, 1, got.Depth)
	read, err := f.reg.Get(f.ctx, want.ThreadID)
	require.NoError(t, err)
	want.Ancestors, want.Depth, want.TraceID = []string{parent.ThreadID}, 1, "0af7651916cd43dd8448eb211c80319c"
	require.Equal(t, want, read)

	kids, err := f.reg.ListChildren(f.ctx, parent.ThreadID)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	acme, err := f.reg.List(f.ctx, Filter{Tenant: "acme"})
	require.NoError(t, err)
	require.Len(t, acme, 2, "the restored thread is in its tenant's index")
	require.Equal(t, []string{parent.ThreadID, want.ThreadID}, []string{acme[0].ThreadID, acme[1].ThreadID})
	active, err := f.reg.ListActive(f.ctx)
	require.NoError(t, err)
	require.Len(t, active, 1, "a finished thread is not active")

	running := *want
	running.ThreadID, running.Status, running.Error = "t/kid-2", thread.StatusRunning, nil
	_, err = f.reg.Restore(f.ctx, &running)
	require.NoError(t, err)
	active, err = f.reg.ListActive(f.ctx)
	require.NoError(t, err)
	require.Len(t, active, 2, "an unfinished one is")

	_, err = f.reg.Restore(f.ctx, want)
	require.ErrorIs(t, err, ErrExists)
	orphan := *want
	orphan.ThreadID, orphan.ParentID = "t/kid-3", "t/gone-1"
	_, err = f.reg.Restore(f.ctx, &orphan)
	require.ErrorIs(t, err, ErrParentNotFound)
	_, err = f.reg.Get(f.ctx, orphan.ThreadID)
	require.ErrorIs(t, err, ErrNotFound)
}
