package orchestrator

import (
	"context"
	"fmt"
	"slices"

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
