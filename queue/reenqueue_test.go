package queue

import (
	"testing"

	"github.com/hibiken/asynq"
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
