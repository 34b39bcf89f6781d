package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// resolvePending suspends the thread until every pending call's threads
// have finished, or answers the calls when they have. It returns done=false
// when the thread suspended (the activation ends, holding no slot).
func (s *session) resolvePending(ctx context.Context) (bool, error) {
	now := s.o.Now()
	c := s.childWait()
	for attempt := 0; attempt < 10; attempt++ {
		targets, deadline, err := c.targets(ctx, s.st.Pending, now)
		if err != nil {
			return false, err
		}
		if len(targets) == 0 {
			break
		}
		suspended, moved, err := c.suspend(ctx, &s.version, targets, deadline)
		if err != nil {
			return false, err
		}
		if moved {
			continue
		}
		if !suspended {
			break
		}
		return false, nil
	}
	// Every pending call can be answered now.
	for _, p := range s.st.Pending {
		answer, isError, err := c.answer(ctx, p)
		if err != nil {
			return false, err
		}
		s.toolJSON(p.CallID, p.Tool, answer, isError)
	}
	s.st.Pending = nil
	return true, nil
}

// childWait is how a thread waits on the threads of its pending calls
// (sync spawns, wait_threads, a sync graph run): the chains it suspends
// on, the suspension, and the calls' answers once the threads ended. It
// holds the thread's record and the services it reads and suspends with.
type childWait struct {
	o       *orchestrator.Runtime
	reg     threadRecords
	acts    activationLeases
	enq     activationQueue
	log     *slog.Logger
	metrics *Metrics
	// rec is the waiting thread's record.
	rec *registry.Record
}

// childWait is the activation's wait on the threads of its pending calls.
func (a *activation) childWait() *childWait {
	return &childWait{o: a.o, reg: a.reg, acts: a.acts, enq: a.enq, log: a.log, metrics: a.w.metrics, rec: a.rec}
}

// targets are the chains the pending calls still wait on (a call past
// its deadline is answered with what there is), each once, and the
// earliest deadline of those that wait.
func (c *childWait) targets(ctx context.Context, pend []pending, now time.Time) ([]registry.WaitTarget, time.Time, error) {
	var deadline time.Time
	var targets []registry.WaitTarget
	seen := map[string]bool{}
	for _, p := range pend {
		if !p.Deadline.IsZero() && !now.Before(p.Deadline) {
			continue // timed out: answered with what there is
		}
		if !p.Deadline.IsZero() && (deadline.IsZero() || p.Deadline.Before(deadline)) {
			deadline = p.Deadline
		}
		for _, id := range p.Threads {
			rec, err := c.child(ctx, id)
			if errors.Is(err, registry.ErrNotFound) {
				continue // lost with Redis writes, and nothing durable: nothing to wait for (lostThread)
			}
			if err != nil {
				return nil, time.Time{}, err
			}
			term, err := c.reg.ResolveChain(ctx, id)
			if err != nil {
				return nil, time.Time{}, err
			}
			if !seen[rec.ChainRootID] {
				seen[rec.ChainRootID] = true
				targets = append(targets, registry.WaitTarget{Root: rec.ChainRootID, Terminal: term})
			}
		}
	}
	return targets, deadline, nil
}

// suspend suspends the thread, at *version (raised to the suspension's),
// until every chain of targets has ended, with a timeout activation at
// deadline (if any). moved: a chain moved on meanwhile, and the targets
// are to be read again; suspended false: every chain had ended.
func (c *childWait) suspend(ctx context.Context, version *int64, targets []registry.WaitTarget, deadline time.Time) (suspended, moved bool, err error) {
	id := c.rec.ThreadID
	suspended, seq, err := c.acts.Suspend(ctx, id, *version, targets)
	if errors.Is(err, registry.ErrChainMoved) {
		return false, true, nil
	}
	if wn := (*registry.WakeNowError)(nil); errors.As(err, &wn) {
		// A chain of another tree finished as this one suspended.
		err = c.o.EnqueueWake(ctx, wn.Wake)
	}
	if err != nil || !suspended {
		return false, false, err
	}
	*version = seq
	if !deadline.IsZero() {
		if err := c.enq.Enqueue(ctx, queue.Activation{ThreadID: id, Reason: "timeout"}, seq, c.rec.Queue,
			asynqProcessAt(deadline)); err != nil {
			return false, false, err
		}
	}
	c.metrics.suspended()
	c.log.Info("thread waiting on children", "targets", len(targets))
	return true, false, nil
}

// answer is pending call p's answer from its threads' ends: a spawn's is
// its child's summary (an error when the child did not complete), a
// wait's every thread's and whether all ended (timed_out otherwise). A
// thread Redis lost that left nothing durable is answered lost
// (lostThread).
func (c *childWait) answer(ctx context.Context, p pending) (_ any, isError bool, _ error) {
	results := map[string]any{}
	allDone, anyFailed := true, false
	for _, id := range p.Threads {
		term, err := c.reg.ResolveChain(ctx, id)
		if err != nil {
			return nil, false, err
		}
		rec, err := c.child(ctx, term)
		if errors.Is(err, registry.ErrNotFound) {
			c.log.Warn("a thread this one waits on is not in the registry, and left nothing durable: Redis lost its registration",
				"waited_id", term)
			results[id] = lostThread(term)
			anyFailed = true
			continue
		}
		if err != nil {
			return nil, false, err
		}
		if !rec.Status.Terminal() || rec.Status == thread.StatusContinued {
			allDone = false
		}
		if rec.Status != thread.StatusCompleted {
			anyFailed = true
		}
		results[id] = childSummary(rec)
	}
	if p.Kind == "spawn" {
		return results[p.Threads[0]], anyFailed, nil
	}
	return map[string]any{"success": allDone, "timed_out": !allDone, "results": results}, false, nil
}

// child is the record of thread id, a child of the waiting thread (or a
// continuation of one), restored from the store should Redis have lost
// it (restoreLost).
func (c *childWait) child(ctx context.Context, id string) (*registry.Record, error) {
	return restoreLost(ctx, c.o, c.log, id, c.rec.ThreadID)
}

// restoreLost is the record of thread id, a child of parent (or a
// continuation of one): should Redis have lost it, restored from its
// transcript and thread.json in the store (orchestrator.Housekeeper.Restore), with its
// chain and its charges. registry.ErrNotFound when it left nothing there
// (lost before its first checkpoint), or what is there cannot be restored
// (it does not verify: logged); Redis or the store out of reach is an
// error, and the activation runs again. A thread's wait and a graph run's
// wait node both read their children through it.
func restoreLost(ctx context.Context, o *orchestrator.Runtime, log *slog.Logger, id, parent string) (*registry.Record, error) {
	rs, err := o.Restore(ctx, id, parent)
	switch {
	case errors.Is(err, orchestrator.ErrNotDurable):
		return nil, fmt.Errorf("thread %q: %w", id, registry.ErrNotFound)
	case err != nil && !isInfra(err):
		log.Error("a thread Redis lost cannot be restored from the store", "waited_id", id, "error", err)
		return nil, fmt.Errorf("thread %q: %w", id, registry.ErrNotFound)
	case err != nil:
		return nil, err
	}
	if len(rs.Threads) > 0 {
		log.Warn("restored a thread Redis lost, which this one waits on, from its transcript", "waited_id", id,
			"status", rs.Record.Status, "threads", len(rs.Threads), "charges", rs.Charges)
	}
	return rs.Record, nil
}

// lostThread is what a parent sees of a child (or a continuation of one)
// whose registration Redis lost (a restart, a failover short of its last
// writes) before the child made a turn durable, so the store has nothing
// to restore it from (child): its start was recorded in the parent's
// durable checkpoint, but no record, task, budget or transcript of it is
// left, so it will never run or finish. The parent's model is told, and
// may start it again.
func lostThread(id string) map[string]any {
	return map[string]any{"thread_id": id, "status": thread.StatusError, "error": registry.ErrorInfo{Code: "thread_lost",
		Message: "thread " + id + " is not in the registry and left no durable transcript: Redis lost its registration (it restarted or failed over without its last writes) before it checkpointed a turn, so it never ran or its run is lost; start it again if it is still needed"}}
}

// childSummary is what a parent sees of a finished (or still running) child.
func childSummary(rec *registry.Record) map[string]any {
	m := map[string]any{
		"thread_id": rec.ThreadID, "directive": rec.Directive, "status": rec.Status, "result": rec.Result,
		"outputs": rec.Outputs, "error": rec.Error, "cost": rec.Cost,
	}
	if rec.IsGraph() {
		// A graph run (run_graph): its id and graph by their names too.
		m["run_id"], m["graph"], m["kind"], m["suppressed_errors"] = rec.ThreadID, rec.Directive, rec.Kind, rec.SuppressedErrors
	}
	return m
}

// pendingThreads are the threads the pending calls wait on, each once, in
// call order.
func pendingThreads(ps []pending) []string {
	var ids []string
	seen := map[string]bool{}
	for _, p := range ps {
		for _, id := range p.Threads {
			if !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}
