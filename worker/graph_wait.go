package worker

import (
	"context"
	"errors"
	"maps"
	"strconv"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
)

// waitStep is a wait node: it waits, holding no slot, for children of
// the run that earlier steps started (async actions, hooks), its threads
// in list order, until all have ended (mode all) or any has (mode any).
// It starts none: a thread Redis lost is restored from the store, or
// settles thread_lost. Its result is a foreach's, of its threads; it
// fails at a failed one unless on_child_error is continue. A resumed run
// keeps the threads that ended ok and waits for the others again.
type waitStep struct{ windowBase }

// start starts a wait node: its threads, checked to be the run's
// children, as the step's.
func (waitStep) start(ctx context.Context, r *graphRun, s *stepRun) (stepEnd, error) {
	v, err := graph.Value(s.n.Threads, s.scope)
	if err != nil {
		return stepFailed(err), nil
	}
	list, err := graph.ForeachItems(v, r.proj.Graphs.MaxForeachItems)
	if err != nil {
		return stepFailed(stepErr("wait_not_list", "wait %s: threads must be a list of thread or run ids: %v", s.n.Name, err)), nil
	}
	p := newPending(r, s, pendingWait, len(list))
	for i, x := range list {
		id, ok := x.(string)
		if !ok || id == "" {
			return stepFailed(stepErr("wait_not_list", "wait %s: item %d is not a thread id", s.n.Name, i)), nil
		}
		rec, err := r.reg.Get(ctx, id)
		if err == nil && rec.ParentID != r.id() {
			return stepFailed(stepErr("wait_not_child", "wait %s: %s is not a child of this run", s.n.Name, id)), nil
		}
		if err != nil && !errors.Is(err, registry.ErrNotFound) {
			return stepEnd{}, err
		}
		p.Children[strconv.Itoa(i)] = id
		p.Threads = append(p.Threads, id)
	}
	if len(list) == 0 {
		return stepOK(foreachResult(nil, nil, 0)), nil
	}
	return openWindow(ctx, r, s, p)
}

func (k waitStep) resume(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep, first bool) (stepEnd, error) {
	return advanceWindow(ctx, r, k, s, p, first)
}

// carry keeps the threads, and those that ended ok as settled
// (stepItems.keep).
func (waitStep) carry(ctx context.Context, r *graphRun, from string, p *pendingStep) (*pendingStep, error) {
	keep := keptPending(p)
	keep.Children = maps.Clone(p.Children)
	if err := r.items.keep(ctx, from, p, keep); err != nil {
		return nil, err
	}
	return keep, nil
}

func (waitStep) node() string { return graph.KindWait }

// plans: none; its threads are earlier steps' children.
func (waitStep) plans() bool { return false }

// window: all its threads run.
func (waitStep) window(_ *graphRun, _ *stepRun, p *pendingStep) int { return p.Items }

// wakesOnAny: mode any ends at the first end.
func (waitStep) wakesOnAny(s *stepRun) bool { return s.n.Mode == "any" }

// done: mode any at the first thread settled, mode all once all have.
func (k waitStep) done(s *stepRun, p *pendingStep, notStarted []string) bool {
	if s.n.Mode == "any" {
		return len(p.Slots) > 0
	}
	return k.windowBase.done(s, p, notStarted)
}

// result is its threads' results in list order and their errors; it
// fails at a failed thread unless on_child_error is continue.
func (waitStep) result(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep) (stepEnd, error) {
	res, failed, first, err := r.items.collect(ctx, p)
	if err != nil {
		return stepEnd{}, err
	}
	s.items = [3]int{len(p.Slots), p.Items, failed}
	if failed > 0 && s.n.OnChildError != "continue" {
		return stepFailed(itemFailed("wait_child_failed", first)), nil
	}
	return stepOK(res), nil
}
