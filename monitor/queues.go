package monitor

import (
	"net/url"
	"sort"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// queueRow is one of spool's asynq queues as the list page shows it,
// beside the threads: asynq counts tasks (activations), not threads, and
// its Failed is not the threads in error. A thread that ends in error (a
// limit, a provider's refusal) ends its activation cleanly, so asynq
// counts that task as processed, not failed; asynq's Failed counts
// activations that stopped with an error of their own (Redis or storage
// unreachable, a lease lost to a takeover, a shutdown past its timeout),
// which asynq retries, and the thread carries on from its last checkpoint.
type queueRow struct {
	Name string // spool's name
	Link string // asynqmon's page of the queue
	asynq.QueueInfo
}

// queueRows reads the namespace's queues; the error is for the page to
// show (the thread list does not depend on it).
func (m *Monitor) queueRows() ([]queueRow, error) {
	names, err := m.inspector.Queues()
	if err != nil {
		return nil, err
	}
	var out []queueRow
	for _, q := range names {
		name, mine := m.cfg.Orch.QueueName(q)
		if !mine {
			continue
		}
		if m.cfg.Orch.Lanes() > 1 {
			name = q // one row per lane of a sharded space's queue
		}
		info, err := m.inspector.GetQueueInfo(q)
		if err != nil {
			return nil, err
		}
		out = append(out, queueRow{Name: name, Link: asynqQueueURL(q), QueueInfo: *info})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// asynqQueueURL is asynqmon's page of an asynq queue.
func asynqQueueURL(q string) string { return AsynqPath + "/queues/" + url.PathEscape(q) }

// asynqTaskURL is asynqmon's page of a task. Thread ids hold slashes: the
// id is one escaped segment (asynqmon's own links do not escape it; the
// script the monitor adds to asynqmon's pages fixes those, and the
// monitor answers asynqmon's task lookups for such ids).
func asynqTaskURL(q, taskID string) string {
	return asynqQueueURL(q) + "/tasks/" + url.PathEscape(taskID)
}

// threadTask is where the thread page links in asynqmon: the task of the
// thread's last activation (the thread id for its start), and its queue.
type threadTask struct {
	ID, Queue         string
	TaskURL, QueueURL string
	// State is the task's asynq state ("" when asynq no longer has it:
	// a finished task is kept an hour).
	State   string
	Retried int
	LastErr string
}

func (m *Monitor) threadTask(rec *spooltype.Record) threadTask {
	q := rec.Queue
	if q == "" {
		q = orchestrator.DefaultQueue
	}
	aq := m.cfg.Orch.QueueOf(q, rec.ThreadID)
	id := rec.Extra["active_task"]
	if id == "" {
		id = rec.ThreadID
	}
	t := threadTask{ID: id, Queue: q, TaskURL: asynqTaskURL(aq, id), QueueURL: asynqQueueURL(aq)}
	if info, err := m.inspector.GetTaskInfo(aq, id); err == nil {
		t.State, t.Retried, t.LastErr = info.State.String(), info.Retried, info.LastErr
	}
	return t
}
