package worker

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/thread"
)

// noRoomLedger is the ledger, except that while noRoom is set it reports
// no room left on any thread's path.
type noRoomLedger struct {
	budgetLedger
	noRoom atomic.Bool
}

func (l *noRoomLedger) Room(ctx context.Context, id string, path []string) (ledger.Room, error) {
	if l.noRoom.Load() {
		return ledger.Room{Limiter: ledger.Level{ID: id, MaxNano: 1, ActualNano: 1}}, nil
	}
	return l.budgetLedger.Room(ctx, id, path)
}

// TestFakeLedgerStopsResumedThread: an activation's services are the
// worker's own small interfaces (deps), so a test can put a fake in one.
// A thread handed back for a retry resumes to a ledger that has no room
// left for it (spent meanwhile by others): it stops with spend_exceeded
// before calling its model again.
func TestFakeLedgerStopsResumedThread(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{RetryHandBack: 100 * time.Millisecond})
	fake := &noRoomLedger{budgetLedger: h.o.Runtime().Services().Ledger}
	h.w.wrapDeps = func(d deps) deps {
		d.ledger = fake
		return d
	}
	limited := &provider.Error{Class: provider.ClassRateLimited, StatusCode: 429, RetryAfter: 300 * time.Millisecond, Message: "slow down"}
	h.prov.script("h/a", reply{err: limited}, say("never"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, thread.StatusWaiting, h.record(id).Status, "handed back")

	fake.noRoom.Store(true)
	require.Equal(t, 1, h.drain(true), "the recover activation at the retry time")
	rec := h.record(id)
	require.Equal(t, thread.StatusError, rec.Status)
	require.Equal(t, thread.CodeSpendExceeded, rec.Error.Code, rec.Error.Message)
	require.Equal(t, 1, h.prov.calls, "no model call after the ledger said no room")
}
