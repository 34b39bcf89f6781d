package worker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestLostChild: Redis lost a child's registration (and with it the
// parent's suspension) while the parent's checkpoint, which waits on the
// child, is durable. The recovered parent is not failed over and over on
// a thread that does not exist: its spawn call is answered with the
// child's loss (thread_lost), and it goes on.
func TestLostChild(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	id := h.startParentOfKid()
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, thread.StatusWaiting, h.record(id).Status)
	kids, err := h.o.Registry.ListChildren(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	kid := kids[0].ThreadID

	// What Redis kept: the parent running (its suspension lost) with no
	// lease, and no trace of the child.
	rdb, ks := h.o.Redis, h.o.Keys
	require.NoError(t, h.insp.DeleteTask(ks.Queue(kids[0].Queue), kid))
	require.NoError(t, rdb.Del(h.ctx, ks.Thread(kid), ks.Ledger(kid), ks.Waits(id), ks.Waiters(kid)).Err())
	require.NoError(t, rdb.SRem(h.ctx, ks.Active(kid), kid).Err())
	require.NoError(t, rdb.SRem(h.ctx, ks.Children(id), kid).Err())
	require.NoError(t, rdb.HSet(h.ctx, ks.Thread(id), "status", string(thread.StatusRunning)).Err())

	orphans, err := h.o.Activations.Orphans(h.ctx)
	require.NoError(t, err)
	require.Len(t, orphans, 1)
	require.NoError(t, h.activate(id, "recover", orphans[0].Version))
	rec := h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "parent done", rec.Result)

	answers := eventsOf[transcript.ToolCallResult](h, id, transcript.TypeToolCallResult)
	require.NotEmpty(t, answers)
	answer := answers[len(answers)-1]
	require.True(t, answer.IsError)
	require.Contains(t, answer.Output, "thread_lost")
	require.True(t, strings.Contains(answer.Output, kid), answer.Output)
}
