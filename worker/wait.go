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
	for attempt := 0; attempt < 10; attempt++ {
		targets, deadline, err := s.waitTargets(ctx, now)
		if err != nil {
			return false, err
		}
		if len(targets) == 0 {
			break
		}
		suspended, moved, err := s.suspendOnChildren(ctx, targets, deadline)
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
		if err := s.answerPending(ctx, p); err != nil {
			return false, err
		}
	}
	s.st.Pending = nil
	return true, nil
}

// waitTargets are the chains the pending calls still wait on (a call past
// its deadline is answered with what there is), each once, and the
// earliest deadline of those that wait.
func (s *session) waitTargets(ctx context.Context, now time.Time) ([]registry.WaitTarget, time.Time, error) {
	var deadline time.Time
	var targets []registry.WaitTarget
	seen := map[string]bool{}
	for _, p := range s.st.Pending {
		if !p.Deadline.IsZero() && !now.Before(p.Deadline) {
			continue // timed out: answered with what there is
		}
		if !p.Deadline.IsZero() && (deadline.IsZero() || p.Deadline.Before(deadline)) {
			deadline = p.Deadline
		}
		for _, id := range p.Threads {
			rec, err := s.child(ctx, id)
			if errors.Is(err, registry.ErrNotFound) {
				continue // lost with Redis writes, and nothing durable: nothing to wait for (lostThread)
			}
			if err != nil {
				return nil, time.Time{}, err
			}
			term, err := s.reg.ResolveChain(ctx, id)
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

// suspendOnChildren suspends the thread until every chain of targets has
// ended, with a timeout activation at deadline (if any). moved: a chain
// moved on meanwhile, and the targets are to be read again; suspended
// false: every chain had ended.
func (s *session) suspendOnChildren(ctx context.Context, targets []registry.WaitTarget, deadline time.Time) (suspended, moved bool, err error) {
	suspended, seq, err := s.acts.Suspend(ctx, s.id(), s.version, targets)
	if errors.Is(err, registry.ErrChainMoved) {
		return false, true, nil
	}
	if wn := (*registry.WakeNowError)(nil); errors.As(err, &wn) {
		// A chain of another tree finished as this one suspended.
		err = s.o.EnqueueWake(ctx, wn.Wake)
	}
	if err != nil || !suspended {
		return false, false, err
	}
	s.version = seq
	if !deadline.IsZero() {
		if err := s.enq.Enqueue(ctx, queue.Activation{ThreadID: s.id(), Reason: "timeout"}, seq, s.rec.Queue,
			asynqProcessAt(deadline)); err != nil {
			return false, false, err
		}
	}
	s.w.metrics.suspended()
	s.log.Info("thread waiting on children", "targets", len(targets))
	return true, false, nil
}

// answerPending answers pending call p with its threads' ends: a spawn
// with its child's summary, a wait with every thread's and whether all
// ended (timed_out otherwise). A thread Redis lost that left nothing
// durable is answered lost (lostThread).
func (s *session) answerPending(ctx context.Context, p pending) error {
	results := map[string]any{}
	allDone, anyFailed := true, false
	for _, id := range p.Threads {
		term, err := s.reg.ResolveChain(ctx, id)
		if err != nil {
			return err
		}
		rec, err := s.child(ctx, term)
		if errors.Is(err, registry.ErrNotFound) {
			s.log.Warn("a thread this one waits on is not in the registry, and left nothing durable: Redis lost its registration",
				"waited_id", term)
			results[id] = lostThread(term)
			anyFailed = true
			continue
		}
		if err != nil {
			return err
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
		s.toolJSON(p.CallID, p.Tool, results[p.Threads[0]], anyFailed)
		return nil
	}
	s.toolJSON(p.CallID, p.Tool, map[string]any{"success": allDone, "timed_out": !allDone, "results": results}, false)
	return nil
}

// child is the record of thread id, a child of this thread (or a
// continuation of one), restored from the store should Redis have lost
// it (restoreLost).
func (s *session) child(ctx context.Context, id string) (*registry.Record, error) {
	return restoreLost(ctx, s.o, s.log, id, s.id())
}

// restoreLost is the record of thread id, a child of parent (or a
// continuation of one): should Redis have lost it, restored from its
// transcript and thread.json in the store (orchestrator.Restore), with its
// chain and its charges. registry.ErrNotFound when it left nothing there
// (lost before its first checkpoint), or what is there cannot be restored
// (it does not verify: logged); Redis or the store out of reach is an
// error, and the activation runs again. A thread's wait and a graph run's
// wait node both read their children through it.
func restoreLost(ctx context.Context, o *orchestrator.Orchestrator, log *slog.Logger, id, parent string) (*registry.Record, error) {
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
