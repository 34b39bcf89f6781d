package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/hibiken/asynq"
)

// Reenqueue is Enqueue for housekeeping, which re-enqueues an activation
// the registry says is due (a recover, a wake) under the task id of an
// earlier enqueue of it. Enqueue takes a task id that exists for an
// activation already on its way; after Redis lost writes, that task may
// be one that finished (completed and kept for its retention, or
// archived) while the registry lost what its run did: the thread would
// wait for it forever. Reenqueue deletes such a finished task with insp
// and enqueues the activation again. It reports whether it enqueued; a
// failure to enqueue is ErrNotEnqueued.
func (e *Enqueuer) Reenqueue(ctx context.Context, insp *asynq.Inspector, a Activation, seq int64, q string) (bool, error) {
	if q == "" {
		q = DefaultQueue
	}
	t, err := NewActivation(withTrace(ctx, a), seq)
	if err != nil {
		return false, err
	}
	aq := e.keys().QueueOf(q, a.ThreadID)
	for attempt := 0; ; attempt++ {
		_, err = e.Client.EnqueueContext(ctx, t, asynq.Queue(aq))
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, asynq.ErrTaskIDConflict) && !errors.Is(err, asynq.ErrDuplicateTask) {
			return false, fmt.Errorf("enqueue %s for %s: %w: %w", a.Reason, a.ThreadID, ErrNotEnqueued, err)
		}
		if attempt > 0 {
			return false, nil
		}
		info, err := insp.GetTaskInfo(aq, TaskID(a, seq))
		if err != nil || (info.State != asynq.TaskStateCompleted && info.State != asynq.TaskStateArchived) {
			return false, nil // on its way (or just gone: the next pass sees)
		}
		if err := insp.DeleteTask(aq, info.ID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return false, fmt.Errorf("re-enqueue %s for %s: delete finished task %s: %w: %w", a.Reason, a.ThreadID, info.ID, ErrNotEnqueued, err)
		}
	}
}
