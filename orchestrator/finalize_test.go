package orchestrator

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestFinalizeInOneScript: the end of a thread (commit, last charge, budget
// release, lease release) is one script: at a stale version nothing of it
// happens; at the held version all of it, once, however often it is run.
func TestFinalizeInOneScript(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t)
	const id = "t/finalize-1"
	rec, v, w := s.runThread(t, id, 1)
	lease := s.holdLease(t, id, "tok", time.Minute)
	var charged []error
	out := func() Outcome {
		return Outcome{Status: thread.StatusCompleted, Result: "done", Cost: thread.Cost{Turns: 1, Spend: 0.25},
			Transcript: new(w.Mark()), Lease: "tok",
			Charge: &Charge{Key: id + ":turn:1", Amount: 0.25, Done: func(_ ledger.Charged, err error) { charged = append(charged, err) }}}
	}

	// A stale version: a conflict, and nothing changed.
	err := s.o.Runtime().Finalize(s.ctx, rec, v-1, out())
	require.ErrorIs(t, err, registry.ErrConflict)
	e, err := s.o.ledger.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, ledger.StatusActive, e.Status)
	require.Zero(t, e.Own, "no charge at a stale version")
	require.Empty(t, charged)
	require.Equal(t, int64(1), s.r.Client.Exists(s.ctx, lease).Val(), "the lease stays")
	cur, err := s.o.reg.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, thread.StatusRunning, cur.Status)

	// The held version: all of it.
	require.NoError(t, s.o.Runtime().Finalize(s.ctx, rec, v, out()))
	require.Equal(t, []error{nil}, charged)
	e, err = s.o.ledger.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, "completed", e.Status)
	require.InDelta(t, 0.25, e.Own, 1e-9)
	require.Equal(t, int64(0), s.r.Client.Exists(s.ctx, lease).Val(), "the lease is released")
	cur, err = s.o.reg.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCompleted, cur.Status)
	require.Equal(t, "done", cur.Result)
	require.Equal(t, *RecordMark(w.Mark()), cur.Transcript)
	require.Equal(t, v+1, cur.Version)

	// A charge that does not fit is clamped and reported, and the thread
	// still ends.
	const id2 = "t/finalize-2"
	rec2, v2, w2 := s.runThread(t, id2, 1)
	o2 := Outcome{Status: thread.StatusError, Error: &registry.ErrorInfo{Code: "spend_exceeded"}, Transcript: new(w2.Mark()),
		Charge: &Charge{Key: id2 + ":turn:1", Amount: 5, Done: func(_ ledger.Charged, err error) { charged = append(charged, err) }}}
	require.NoError(t, s.o.Runtime().Finalize(s.ctx, rec2, v2, o2))
	require.Len(t, charged, 2)
	var le *thread.LimitError
	require.ErrorAs(t, charged[1], &le)
	e, err = s.o.ledger.Get(s.ctx, id2)
	require.NoError(t, err)
	require.Equal(t, "error", e.Status)
	require.InDelta(t, 1, e.Own, 1e-9)
	require.InDelta(t, 4, e.Overrun, 1e-9)
}

// TestFinalizeOutlivesItsCaller: once the end is committed (and the lease
// released with it), a context the caller cancels — as the worker's
// heartbeat does when it finds the released lease gone — no longer cuts
// short thread.json.
func TestFinalizeOutlivesItsCaller(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t)
	const id = "t/finalize-late-cancel"
	rec, v, w := s.runThread(t, id, 1)
	s.o.store = ctxStore{s.o.store} // as S3 does, a write refuses a done context
	s.holdLease(t, id, "tok", time.Minute)
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	out := Outcome{Status: thread.StatusCompleted, Result: "done", Cost: thread.Cost{Turns: 1, Spend: 0.25},
		Transcript: new(w.Mark()), Lease: "tok",
		// Done runs as the committed script's reply is read.
		Charge: &Charge{Key: id + ":turn:1", Amount: 0.25, Done: func(ledger.Charged, error) { cancel() }}}
	require.NoError(t, s.o.Runtime().Finalize(ctx, rec, v, out))
	require.Error(t, ctx.Err(), "the caller's context was cancelled mid-Finalize")
	data, err := s.store.Get(s.ctx, blobkey.ThreadJSON(id))
	require.NoError(t, err)
	require.Contains(t, string(data), `"status":"completed"`, "the final thread.json is written")
}

// ctxStore refuses writes on a done context, as the S3 client does.
type ctxStore struct{ blobstore.Store }

func (c ctxStore) Put(ctx context.Context, key string, data []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.Store.Put(ctx, key, data)
}

// TestFinalizeHandoff: a handoff's end links the continuation in the same
// script, charges the last turn and releases the lease, and leaves the
// chain's ledger entry to the continuation.
func TestFinalizeHandoff(t *testing.T) {
	t.Parallel()
	s := newVerifySetup(t)
	const id, next = "t/handoff-1", "t/handoff-2"
	rec, v, w := s.runThread(t, id, 1)
	_, err := s.o.reg.Register(s.ctx, registry.NewThread{ThreadID: next, Directive: "t/verify", Limits: thread.DefaultLimits(),
		PreviousThreadID: id, ChainRootID: rec.ChainRootID, ContinuationOf: id})
	require.NoError(t, err)
	var charged []error
	out := Outcome{Status: thread.StatusContinued, ContinuationID: next, Cost: thread.Cost{Turns: 1, Spend: 0.25},
		Transcript: new(w.Mark()), Lease: "tok",
		Charge: &Charge{Key: id + ":turn:1", Amount: 0.25, Done: func(_ ledger.Charged, err error) { charged = append(charged, err) }}}
	require.NoError(t, s.o.Runtime().Finalize(s.ctx, rec, v, out))
	require.Equal(t, []error{nil}, charged)

	old, err := s.o.reg.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, thread.StatusContinued, old.Status)
	require.Equal(t, next, old.ContinuationThreadID)
	require.Equal(t, v+2, old.Version, "the commit and the link")
	cont, err := s.o.reg.Get(s.ctx, next)
	require.NoError(t, err)
	require.Equal(t, id, cont.ContinuationOf)
	require.Equal(t, rec.ChainRootID, cont.ChainRootID)
	e, err := s.o.ledger.Get(s.ctx, id)
	require.NoError(t, err)
	require.Equal(t, ledger.StatusActive, e.Status, "the chain's entry goes on with the continuation")
	require.InDelta(t, 0.25, e.Own, 1e-9)
	require.Zero(t, s.r.Client.Exists(s.ctx, s.o.keys.Lease(id)).Val(), "the lease is released")

	// Finalizing again at the version held is stale, and changes nothing.
	err = s.o.Runtime().Finalize(s.ctx, rec, v, out)
	require.ErrorIs(t, err, registry.ErrConflict)
	require.Len(t, charged, 1)
}
