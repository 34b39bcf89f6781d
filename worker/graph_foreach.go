package worker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// foreachStep is a foreach: its action once per item of its over. Tool
// items run here and now, in order or up to max_concurrency at once, and
// the step ends with them in the same activation (tools: at least once,
// a crash runs them again); directive and graph items are children in a
// window of max_concurrency (one at a time unless parallel), the run
// woken as each ends, each item settled durably. It fails at its first
// failed item unless on_item_error is continue, and when every item
// failed. A resumed run keeps the items it settled ok.
type foreachStep struct{ windowBase }

// start starts step s: its items resolved, run as tools here or as
// children in a window.
func (k foreachStep) start(ctx context.Context, r *graphRun, s *stepRun) (stepEnd, error) {
	items, err := foreachItems(r, s)
	if err != nil {
		return stepFailed(err), nil
	}
	s.items[1] = len(items)
	if len(items) == 0 {
		return stepOK(foreachResult(nil, nil, 0)), nil
	}
	if s.n.Action.Tool != "" && !strings.Contains(s.n.Action.Tool, "${") {
		if _, err := r.proj.Graph(s.n.Action.Tool); err != nil || r.actions.has(s.n.Action.Tool) {
			return k.tools(ctx, r, s, items)
		}
	}
	return startChildren(ctx, r, s, pendingForeach, len(items))
}

// foreachItems resolves a foreach's over.
func foreachItems(r *graphRun, s *stepRun) ([]any, error) {
	v, err := graph.Value(s.n.Over, s.scope)
	if err != nil {
		return nil, err
	}
	limit := s.n.MaxItems
	if limit == 0 {
		limit = r.proj.Graphs.MaxForeachItems
	}
	return graph.ForeachItems(v, limit)
}

// itemScope is the scope of item i of a foreach step.
func itemScope(s *stepRun, items []any, i int) map[string]any {
	return graph.ItemScope(s.scope, s.n.As, items[i], i, len(items))
}

// tools runs a foreach of tool items in the activation, in order or up
// to max_concurrency at once; the step ends with them together.
func (k foreachStep) tools(ctx context.Context, r *graphRun, s *stepRun, items []any) (stepEnd, error) {
	results, errs, err := k.runTools(ctx, r, s, items)
	if err != nil {
		return stepEnd{}, err
	}
	if stopRequested(ctx) {
		return stepEnd{}, context.Cause(ctx)
	}
	return k.toolsEnd(s, results, errs), nil
}

// runTools runs the tool items of a foreach, up to its concurrency at
// once: each one's result, or its failure. Unless the foreach goes on
// after a failed item, the first failure stops the items not yet begun;
// with min_success, reaching it or losing it does; an infrastructure
// error stops them all and is returned.
func (k foreachStep) runTools(ctx context.Context, r *graphRun, s *stepRun, items []any) ([]any, []*graph.StepError, error) {
	conc := 1
	if s.n.Parallel {
		conc = r.g.Concurrency(s.n)
	}
	ictx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	t := &toolTally{results: make([]any, len(items)), errs: make([]*graph.StepError, len(items)), failFast: k.stopsOnFailure(s),
		minN: s.n.MinSuccess, stop: stop}
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i := range items {
		if ictx.Err() != nil {
			break
		}
		sem <- struct{}{}
		if ictx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			res, se, err := k.runTool(ictx, r, s, items, i)
			t.record(ictx, i, res, se, err)
		}(i)
	}
	wg.Wait()
	return t.results, t.errs, t.infra
}

// toolTally is what a foreach's tool items have come to so far, and
// when it stops the ones not yet begun.
type toolTally struct {
	mu         sync.Mutex
	results    []any
	errs       []*graph.StepError
	infra      error
	okN, failN int
	failFast   bool
	minN       int // min_success, 0 unset
	stop       context.CancelCauseFunc
}

// record records how item i ended: its result, its failure, or an
// infrastructure error (which stops every item; an item stopped because
// the others were is not recorded).
func (t *toolTally) record(ictx context.Context, i int, res any, se *graph.StepError, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case err != nil && t.infra == nil && ictx.Err() == nil:
		t.infra = err
		t.stop(err)
	case se != nil:
		t.errs[i] = se
		t.failN++
		if t.failFast || t.minN > 0 && t.failN > len(t.results)-t.minN {
			t.stop(errForeachStop)
		}
	case err == nil:
		t.results[i] = res
		t.okN++
		if t.minN > 0 && t.okN >= t.minN {
			t.stop(errForeachStop)
		}
	}
}

// runTool runs tool item i of a foreach: its result, its failure as the
// step sees it, or an infrastructure error.
func (foreachStep) runTool(ctx context.Context, r *graphRun, s *stepRun, items []any, i int) (any, *graph.StepError, error) {
	sc := itemScope(s, items, i)
	a, err := r.actions.resolve(s.n.Action, sc)
	if err != nil {
		return nil, asStepError(err), nil
	}
	return r.actions.run(ctx, s, a, sc, fmt.Sprintf("step-%d-item-%d", s.step, i))
}

// toolsEnd is how a foreach of tool items ended, from their results and
// failures (errs, by item): it fails when an item failed and the foreach
// stops at a failure, or when every item failed.
func (k foreachStep) toolsEnd(s *stepRun, results []any, errs []*graph.StepError) stepEnd {
	var list []map[string]any
	failed, first := 0, (*graph.StepError)(nil)
	for i, e := range errs {
		if e == nil {
			continue
		}
		failed++
		if first == nil {
			first = e
		}
		list = append(list, map[string]any{"index": i, "code": e.Code, "message": e.Message})
	}
	s.items = [3]int{len(results) - failed, len(results), failed}
	res := foreachResult(results, list, failed)
	if n := s.n.MinSuccess; n > 0 {
		ok := 0
		for _, r := range results {
			if r != nil {
				ok++
			}
		}
		s.items[0] = ok + failed
		res["succeeded"], res["cancelled"] = ok, len(results)-ok-failed
		if ok < n {
			return stepFailed(stepErr(graph.CodeMinSuccessUnreachable, "foreach %s: %d of %d items failed: min_success %d can no longer be reached (%d succeeded)",
				s.n.Name, failed, len(results), n, ok))
		}
		return stepOK(res)
	}
	switch {
	case failed > 0 && k.stopsOnFailure(s):
		return stepFailed(&graph.StepError{Code: graph.CodeForeachItemFailed, Message: "item failed: " + first.Message, ThreadID: first.ThreadID})
	case failed == len(results):
		return stepFailed(&graph.StepError{Code: graph.CodeForeachAllFailed, Message: fmt.Sprintf("all %d items failed; the first: %s", failed, first.Message)})
	}
	return stepOK(res)
}

// minSuccessEnd ends a foreach with min_success N whose settled items
// decide it: its children still running are cancelled (their spend
// stops: each is told, and a cancel already made is made again at no
// cost after a crash), and it succeeds with the results of those that
// succeeded, or fails min_success_unreachable.
func (foreachStep) minSuccessEnd(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep, res map[string]any, failed int) (stepEnd, error) {
	cancelled, err := cancelChildren(ctx, r, p.running(nil))
	if err != nil {
		return stepEnd{}, err
	}
	ok := len(p.Slots) - failed
	res["cancelled"] = cancelled
	n := s.n.MinSuccess
	if ok < n {
		return stepFailed(stepErr(graph.CodeMinSuccessUnreachable, "foreach %s: %d of %d items failed: min_success %d can no longer be reached (%d succeeded)",
			s.n.Name, failed, p.Items, n, ok)), nil
	}
	r.log.Info("foreach reached min_success", "step", p.Step, "node", p.Node, "succeeded", ok, "min_success", n, "cancelled", cancelled)
	r.emit(transcript.TypeForeachCompleted, transcript.ForeachCompleted{Step: p.Step, Node: p.Node, Items: p.Items, Succeeded: ok, Failed: failed})
	return stepOK(res), nil
}

// cancelChildren cancels the children ids of a step that no longer
// needs them, with their subtrees, and counts those it found (a planned
// child never started is not). A cancel already made is made again at
// no cost, so an activation after a crash sends them all again.
func cancelChildren(ctx context.Context, r *graphRun, ids []string) (int, error) {
	cancelled := 0
	for _, id := range ids {
		_, err := r.o.Cancel(ctx, id, true)
		switch {
		case errors.Is(err, registry.ErrNotFound):
			// planned, never started
		case err != nil:
			return cancelled, err
		default:
			cancelled++
		}
	}
	return cancelled, nil
}

// errForeachStop stops a foreach's other items after one failed.
var errForeachStop = errors.New("an item failed")

// foreachResult is a foreach's (and a wait's) result.
func foreachResult(results []any, errs []map[string]any, failed int) map[string]any {
	if results == nil {
		results = []any{}
	}
	e := make([]any, 0, len(errs))
	for _, x := range errs {
		e = append(e, x)
	}
	return map[string]any{"results": results, "errors": e, "succeeded": len(results) - failed, "failed": failed}
}

func (k foreachStep) resume(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep, first bool) (stepEnd, error) {
	return advanceWindow(ctx, r, k, s, p, first)
}

// carry keeps the items that settled ok (stepItems.keep).
func (foreachStep) carry(ctx context.Context, r *graphRun, from string, p *pendingStep) (*pendingStep, error) {
	keep := keptPending(p)
	if err := r.items.keep(ctx, from, p, keep); err != nil {
		return nil, err
	}
	return keep, nil
}

func (foreachStep) node() string { return graph.KindForeach }

// items are the foreach's items, resolved from the step's own snapshot
// as they were when it began; a foreach whose items changed fails.
func (foreachStep) items(r *graphRun, s *stepRun, p *pendingStep) ([]any, error) {
	items, err := foreachItems(r, s)
	if err != nil || len(items) != p.Items {
		return nil, stepErr(graph.CodeForeachNotList, "foreach %s: its items changed while it ran", s.n.Name)
	}
	return items, nil
}

func (foreachStep) scope(s *stepRun, items []any, i int) map[string]any {
	return itemScope(s, items, i)
}

// window: max_concurrency when parallel, else one at a time.
func (foreachStep) window(r *graphRun, s *stepRun, _ *pendingStep) int {
	if s.n.Parallel {
		return r.g.Concurrency(s.n)
	}
	return 1
}

// stopsOnFailure: a failed item stops it unless on_item_error is
// continue, or min_success decides when it ends.
func (foreachStep) stopsOnFailure(s *stepRun) bool {
	return s.n.OnItemError != "continue" && s.n.MinSuccess == 0
}

// done: with min_success, as soon as that many items succeeded or that
// many can no longer; else once every item has settled.
func (k foreachStep) done(s *stepRun, p *pendingStep, notStarted []string) bool {
	if n := s.n.MinSuccess; n > 0 {
		ok, failed := settledCounts(p)
		if ok >= n || failed > p.Items-n {
			return true
		}
	}
	return k.windowBase.done(s, p, notStarted)
}

// settledCounts are how many of p's settled items succeeded and failed.
func settledCounts(p *pendingStep) (ok, failed int) {
	for _, sl := range p.Slots {
		if sl.Status == "ok" {
			ok++
		} else {
			failed++
		}
	}
	return ok, failed
}

// wakesOnAny: a sliding window, refilled as each child ends.
func (foreachStep) wakesOnAny(*stepRun) bool { return true }

// result is the items' results in item order and their errors; it fails
// at a failed item unless on_item_error is continue, and when all
// failed.
func (k foreachStep) result(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep) (stepEnd, error) {
	res, failed, first, err := r.items.collect(ctx, p)
	if err != nil {
		return stepEnd{}, err
	}
	s.items = [3]int{len(p.Slots), p.Items, failed}
	if s.n.MinSuccess > 0 {
		return k.minSuccessEnd(ctx, r, s, p, res, failed)
	}
	switch {
	case failed > 0 && k.stopsOnFailure(s):
		return stepFailed(itemFailed(graph.CodeForeachItemFailed, first)), nil
	case failed > 0 && failed == len(p.Slots):
		return stepFailed(&graph.StepError{Code: graph.CodeForeachAllFailed, Message: fmt.Sprintf("all %d items failed; the first (%s): %s", failed, first.Code, first.Message)}), nil
	}
	r.emit(transcript.TypeForeachCompleted, transcript.ForeachCompleted{Step: p.Step, Node: p.Node, Items: p.Items, Succeeded: p.Items - failed, Failed: failed})
	return stepOK(res), nil
}
