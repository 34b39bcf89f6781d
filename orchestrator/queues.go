package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/ratelimit"
)

// QueueServing says which running workers serve a spool queue.
type QueueServing struct {
	// Queue is the spool queue asked about ("" means queue.DefaultQueue).
	Queue string
	// Served: at least one running worker takes tasks from it.
	Served bool
	// Queues are the spool queues of this namespace that running workers
	// serve, sorted.
	Queues []string
	// Workers is the number of running workers (asynq servers) serving
	// a queue of this namespace.
	Workers int
}

// String describes the queue's service in one phrase for messages.
func (q QueueServing) String() string {
	switch {
	case q.Served:
		return fmt.Sprintf("queue %q is served", q.Queue)
	case q.Workers == 0:
		return fmt.Sprintf("no worker is running to serve queue %q", q.Queue)
	}
	return fmt.Sprintf("no running worker serves queue %q (%d running serve %v)", q.Queue, q.Workers, q.Queues)
}

// QueueServed asks asynq which servers are running (each heartbeats its
// configuration into Redis; a dead one expires within seconds) and whether
// one serves spool queue q of this namespace. A thread enqueued to a queue
// no worker serves waits in created until one does: `thread run --queue`
// warns and `thread show` says so.
func (o *Orchestrator) QueueServed(ctx context.Context, q string) (QueueServing, error) {
	if q == "" {
		q = queue.DefaultQueue
	}
	out := QueueServing{Queue: q}
	if err := ctx.Err(); err != nil {
		return out, err
	}
	servers, err := asynq.NewInspectorFromRedisClient(o.rdb).Servers()
	if err != nil {
		return out, fmt.Errorf("list workers: %w", err)
	}
	for _, s := range servers {
		if s.Status != "active" { // "stopped": taking no new tasks
			continue
		}
		ours := false
		for name := range s.Queues {
			sq, ok := o.keys.QueueName(name)
			if !ok {
				continue // another namespace's
			}
			ours = true
			if !slices.Contains(out.Queues, sq) {
				out.Queues = append(out.Queues, sq)
			}
			out.Served = out.Served || sq == q
		}
		if ours {
			out.Workers++
		}
	}
	slices.Sort(out.Queues)
	return out, nil
}

// QueueOf is the asynq queue of thread id's activations on spool queue q:
// its name in the orchestrator's namespace, or in a sharded space the
// lane of id's shard (keyspace.Space.QueueOf).
func (o *Orchestrator) QueueOf(q, id string) string { return o.keys.QueueOf(q, id) }

// QueueLanes are the asynq queues of spool queue q, every lane: the ones a
// worker serving q listens on.
func (rt *Runtime) QueueLanes(q string) []string { return rt.keys.QueueLanes(q) }

// QueueName is the spool queue of asynq queue aq (a lane's or a queue's
// name), ok false for another namespace's.
func (o *Orchestrator) QueueName(aq string) (string, bool) { return o.keys.QueueName(aq) }

// Shards is the shard count of the orchestrator's namespace
// (Config.Shards).
func (o *Orchestrator) Shards() int { return o.keys.Shards() }

// Lanes is how many asynq queues carry one spool queue: 1 unless the
// namespace is sharded (keyspace.Space.Lanes).
func (o *Orchestrator) Lanes() int { return o.keys.Lanes() }

// RateLimiter returns a limiter of the fleet-wide model rate limits over
// the orchestrator's Redis and namespace, on its clock.
func (o *Orchestrator) RateLimiter() *ratelimit.Limiter { return ratelimit.New(o.rdb, o.keys, o.Now) }

// QueueState is one spool queue as `spool queue list` shows it: its
// asynq lanes' counts summed, and whether every lane is paused.
type QueueState struct {
	Name      string `json:"name"`
	Paused    bool   `json:"paused"`
	Pending   int    `json:"pending"`
	Active    int    `json:"active"`
	Scheduled int    `json:"scheduled"`
	Retry     int    `json:"retry"`
	Archived  int    `json:"archived"`
}

// Queues are the namespace's spool queues that asynq knows (a queue
// exists once a task was enqueued to it), by name.
func (o *Orchestrator) Queues(ctx context.Context) ([]QueueState, error) {
	insp := asynq.NewInspectorFromRedisClient(o.rdb)
	names, err := insp.Queues()
	if err != nil {
		return nil, fmt.Errorf("list queues: %w", err)
	}
	byName := map[string]*QueueState{}
	var order []string
	for _, aq := range names {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		name, ok := o.keys.QueueName(aq)
		if !ok {
			continue
		}
		info, err := insp.GetQueueInfo(aq)
		if err != nil {
			return nil, fmt.Errorf("queue %s: %w", name, err)
		}
		st := byName[name]
		if st == nil {
			st = &QueueState{Name: name, Paused: true}
			byName[name] = st
			order = append(order, name)
		}
		st.Paused = st.Paused && info.Paused
		st.Pending += info.Pending
		st.Active += info.Active
		st.Scheduled += info.Scheduled
		st.Retry += info.Retry
		st.Archived += info.Archived
	}
	slices.Sort(order)
	out := make([]QueueState, 0, len(order))
	for _, n := range order {
		out = append(out, *byName[n])
	}
	return out, nil
}

// PauseQueue pauses (pause true) or unpauses spool queue q in every lane:
// a paused queue's activations stay queued, no worker takes them, and
// the runs in them wait (those running finish their activation).
// Pausing a paused queue is no error.
func (o *Orchestrator) PauseQueue(ctx context.Context, q string, pause bool) error {
	if err := queue.CheckName(q); err != nil {
		return err
	}
	insp := asynq.NewInspectorFromRedisClient(o.rdb)
	for _, lane := range o.keys.QueueLanes(q) {
		if err := ctx.Err(); err != nil {
			return err
		}
		var err error
		if pause {
			err = insp.PauseQueue(lane)
		} else {
			err = insp.UnpauseQueue(lane)
		}
		// asynq refuses a pause of a paused queue (and the reverse):
		// the state asked for is the state it is in.
		if err != nil && !strings.Contains(err.Error(), "already paused") && !strings.Contains(err.Error(), "not paused") {
			return fmt.Errorf("queue %s: %w", q, err)
		}
	}
	return nil
}
