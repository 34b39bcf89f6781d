package queue

import (
	"net"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
)

// Reenqueue enqueues an activation whose task id is held by a finished
// task (here archived; completed is the same case), which Enqueue takes
// for one already on its way; a task still queued is left as it is.
func TestReenqueueReplacesFinishedTask(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ks := keyspace.New(r.Namespace)
	ctx := t.Context()
	e := &Enqueuer{Client: asynq.NewClientFromRedisClient(r.Client), Keys: ks}
	insp := asynq.NewInspectorFromRedisClient(r.Client)
	aq := ks.Queue("reenqueue")
	t.Cleanup(func() { _ = insp.DeleteQueue(aq, true) })
	a := Activation{ThreadID: "x", Reason: "recover"}
	id := TaskID(a, 7)
	require.Equal(t, "x@recover-7", id)

	require.NoError(t, e.Enqueue(ctx, a, 7, "reenqueue"))
	require.NoError(t, insp.ArchiveTask(aq, id)) // it ran and finished
	require.NoError(t, e.Enqueue(ctx, a, 7, "reenqueue"), "Enqueue takes the finished task for one on its way")
	info, err := insp.GetTaskInfo(aq, id)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateArchived, info.State)

	ok, err := e.Reenqueue(ctx, insp, a, 7, "reenqueue")
	require.NoError(t, err)
	require.True(t, ok)
	info, err = insp.GetTaskInfo(aq, id)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStatePending, info.State)

	ok, err = e.Reenqueue(ctx, insp, a, 7, "reenqueue")
	require.NoError(t, err)
	require.False(t, ok, "a queued task is on its way")
	tasks, err := insp.ListPendingTasks(aq)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
}

// An enqueue Redis does not take (its connection refused, as in a
// failover) is ErrNotEnqueued, for Enqueue and Reenqueue alike: asynq
// words the network error as text, which its callers could not tell
// from a refusal.
func TestEnqueueNotTaken(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rdb := redis.NewClient(&redis.Options{Addr: l.Addr().String(), MaxRetries: -1})
	require.NoError(t, l.Close())
	c := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { _ = c.Close(); _ = rdb.Close() })
	e := &Enqueuer{Client: c, Keys: keyspace.New("refused")}
	a := Activation{ThreadID: "x", Reason: "start"}
	err = e.Enqueue(t.Context(), a, 0, "")
	require.ErrorIs(t, err, ErrNotEnqueued)
	require.ErrorContains(t, err, "enqueue start for x: ")
	_, err = e.Reenqueue(t.Context(), asynq.NewInspectorFromRedisClient(rdb), a, 0, "")
	require.ErrorIs(t, err, ErrNotEnqueued)
}
