package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// Steps that start children (a directive or graph action, a foreach of
// them) and steps that wait (wait, approval) hold no slot while they
// wait: the run is suspended on its children's chains and woken when one
// ends (SuspendAny: a foreach's sliding window) or all have (Suspend).
// A child's id is planned from (run, step, item, attempt) and recorded in
// a segment before it starts (step_started), so a step run again after a
// crash or a failover adopts the children it started instead of starting
// twins (orchestrator.StartRequest.Planned): the same mechanism as a
// thread's spawns.

// startChild starts (or adopts) the child of action a planned by seed.
func (r *graphRun) startChild(ctx context.Context, a *graph.Action, inputs map[string]any, seed string) (*registry.Record, error) {
	req, err := r.childRequest(a, inputs, seed)
	if err != nil {
		return nil, err
	}
	return r.o.Start(ctx, req)
}

// childRequest is the start of action a's child planned by seed.
func (r *graphRun) childRequest(a *graph.Action, inputs map[string]any, seed string) (orchestrator.StartRequest, error) {
	limits := map[string]any{}
	maxSteps := 0
	for k, v := range a.Limits {
		if k == "max_steps" {
			f, err := thread.Number(v)
			if err != nil || f < 1 {
				return orchestrator.StartRequest{}, fmt.Errorf("limits.max_steps %v: want a positive whole number", v)
			}
			maxSteps = int(f)
			continue
		}
		limits[k] = v
	}
	overrides, err := thread.LimitsFromMap(limits)
	if err != nil {
		return orchestrator.StartRequest{}, fmt.Errorf("limits: %w", err)
	}
	name := a.Directive
	if a.Graph != "" {
		name = a.Graph
	}
	// Planned at the run's registration time, which a failover that loses
	// a claim (and its started_at) cannot change: a rerun plans the same id.
	id := r.o.PlannedID(orchestrator.IDRequest{Directive: name, ParentID: r.id()}, r.rec.CreatedAt, seed)
	return orchestrator.StartRequest{Directive: name, Graph: a.Graph != "", Inputs: inputs, Model: a.Model, LimitOverrides: overrides,
		MaxSteps: maxSteps, ParentID: r.id(), Reserve: a.Reserve, ID: id, Planned: true}, nil
}

// seed names a planned child within the run.
func seed(step, item, attempt int) string {
	return fmt.Sprintf("step/%d/item/%d/attempt/%d", step, item, attempt)
}

// planChildren starts a child step: an action's one child (sync or
// async).
func (r *graphRun) planChildren(ctx context.Context, s *stepRun, kind string, items int) (outcome, error) {
	a, err := r.resolveAction(s.n.Action, s.scope)
	if err != nil {
		return r.complete(ctx, s, nil, err)
	}
	if !graph.Permitted(r.rec.Capabilities, a) {
		return r.complete(ctx, s, nil, stepErr(graph.CodePermissionDenied, "starting %s needs capability %s, which this run does not hold", a.ID(), a.Capability()))
	}
	if a.Async {
		// The child runs on as the run's child; the step only starts it.
		// Its id is planned all the same: a step run again adopts it.
		inputs, err := graph.Params(a.Inputs, s.scope)
		if err != nil {
			return r.complete(ctx, s, nil, err)
		}
		rec, err := r.startChild(ctx, a, inputs, seed(s.step, 0, s.attempt))
		if err != nil {
			if isInfra(err) {
				return outcome{}, err
			}
			r.emitRefused(a, err)
			return r.complete(ctx, s, nil, refusal(err))
		}
		r.emitSpawned(a, rec, true)
		s.threadIDs = []string{rec.ThreadID}
		key := "thread_id"
		if a.Graph != "" {
			key = "run_id"
		}
		return r.complete(ctx, s, map[string]any{key: rec.ThreadID, "status": "running"}, nil)
	}
	p := &pendingStep{Step: s.step, Node: s.n.Name, Kind: kind, Attempt: s.attempt, StartedAt: r.o.Now().UTC(), Items: items,
		Children: map[string]string{}, Slots: map[string]slot{}}
	r.cp.Pending, r.results = p, map[string]any{}
	return r.advancePending(ctx, s, true)
}

// startForeach starts a foreach step: tool items run here and now;
// directive and graph items become children in a window.
func (r *graphRun) startForeach(ctx context.Context, s *stepRun) (outcome, error) {
	items, err := r.foreachItems(s)
	if err != nil {
		return r.complete(ctx, s, nil, err)
	}
	s.items[1] = len(items)
	if len(items) == 0 {
		return r.complete(ctx, s, foreachResult(nil, nil, 0), nil)
	}
	if s.n.Action.Tool != "" && !strings.Contains(s.n.Action.Tool, "${") {
		if _, err := r.proj.Graph(s.n.Action.Tool); err != nil || r.hasTool(s.n.Action.Tool) {
			return r.foreachTools(ctx, s, items)
		}
	}
	return r.planChildren(ctx, s, pendingForeach, len(items))
}

// hasTool reports whether the run's tools have id.
func (r *graphRun) hasTool(id string) bool {
	_, ok := r.tools.Lookup(id)
	return ok
}

// foreachItems resolves a foreach's over.
func (r *graphRun) foreachItems(s *stepRun) ([]any, error) {
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

// foreachTools runs a foreach of tool items in the activation, in order
// or up to max_concurrency at once; the step settles them together.
func (r *graphRun) foreachTools(ctx context.Context, s *stepRun, items []any) (outcome, error) {
	results := make([]any, len(items))
	errs := make([]*graph.StepError, len(items))
	conc := 1
	if s.n.Parallel {
		conc = r.g.Concurrency(s.n)
	}
	failFast := s.n.OnItemError != "continue"
	ictx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	sem := make(chan struct{}, conc)
	done := make(chan struct{})
	var infra error
	var mu = make(chan struct{}, 1)
	pendingN := 0
	for i := range items {
		if ictx.Err() != nil {
			break
		}
		sem <- struct{}{}
		if ictx.Err() != nil {
			<-sem
			break
		}
		pendingN++
		go func(i int) {
			defer func() { <-sem; done <- struct{}{} }()
			sc := itemScope(s, items, i)
			a, err := r.resolveAction(s.n.Action, sc)
			var res any
			var se *graph.StepError
			if err != nil {
				se = asStepError(err)
			} else {
				res, se, err = r.runTool(ictx, s, a, sc, fmt.Sprintf("step-%d-item-%d", s.step, i))
			}
			mu <- struct{}{}
			defer func() { <-mu }()
			switch {
			case err != nil && infra == nil && ictx.Err() == nil:
				infra = err
				stop(err)
			case se != nil:
				errs[i] = se
				if failFast {
					stop(errForeachStop)
				}
			case err == nil:
				results[i] = res
			}
		}(i)
	}
	for ; pendingN > 0; pendingN-- {
		<-done
	}
	if infra != nil {
		return outcome{}, infra
	}
	if stopRequested(ctx) {
		return outcome{}, context.Cause(ctx)
	}
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
	s.items = [3]int{len(items) - failed, len(items), failed}
	res := foreachResult(results, list, failed)
	switch {
	case failed > 0 && failFast:
		return r.complete(ctx, s, nil, &graph.StepError{Code: graph.CodeForeachItemFailed, Message: "item failed: " + first.Message, ThreadID: first.ThreadID})
	case failed == len(items):
		return r.complete(ctx, s, nil, &graph.StepError{Code: graph.CodeForeachAllFailed, Message: fmt.Sprintf("all %d items failed; the first: %s", failed, first.Message)})
	}
	return r.complete(ctx, s, res, nil)
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

// resumePending continues the step in flight.
func (r *graphRun) resumePending(ctx context.Context) (outcome, error) {
	p := r.cp.Pending
	n := r.g.Node(p.Node)
	if n == nil {
		r.decideError("graph_invalid", fmt.Sprintf("the run's pending step names node %q, which the graph does not have", p.Node), p.Node, p.Step, "")
		return finished, nil
	}
	s := r.newStep(n, p.Step, p.Attempt, p.StartedAt)
	if r.results == nil {
		r.results = map[string]any{}
	}
	if p.Children == nil {
		p.Children = map[string]string{}
	}
	if p.Slots == nil {
		p.Slots = map[string]slot{}
	}
	if p.Kind == pendingApproval {
		return r.advanceApproval(ctx, s, false)
	}
	return r.advancePending(ctx, s, false)
}

// advancePending moves a child step on: it settles the children that
// ended, plans the next items (their ids durable before any starts),
// starts as many as the window allows, and completes the step once every
// item has settled. While children run it waits for one to end in the
// activation (childHold), then suspends until one does.
//
// Plans run ahead of starts: up to two windows of max_concurrency items
// are planned (recorded) beyond those running, so a child that ends is
// replaced at once, by an item already recorded, without a segment
// between (planLimit). A segment is written when new items are planned,
// and, for the progress people watch, when items settled and
// graphProgressEvery has passed; an item settled after the last segment
// is settled again, from its child's record, by whichever activation
// goes on.
func (r *graphRun) advancePending(ctx context.Context, s *stepRun, first bool) (outcome, error) {
	p := r.cp.Pending
	var items []any
	if p.Kind == pendingForeach {
		var err error
		if items, err = r.foreachItems(s); err != nil || len(items) != p.Items {
			// The state is the step's own snapshot: its over resolves as
			// it did when the step began.
			return r.complete(ctx, s, nil, stepErr(graph.CodeForeachNotList, "foreach %s: its items changed while it ran", s.n.Name))
		}
	}
	window := r.window(s, p)
	hold := &childHold{r: r}
	defer hold.close()
	for round := 0; ; round++ {
		if round > 100000 {
			return outcome{}, fmt.Errorf("graph run %s: step %d does not settle", r.id(), p.Step)
		}
		changed, unstarted, err := r.settle(ctx, s, p)
		if err != nil {
			return outcome{}, err
		}
		if r.pendingDone(s, p, unstarted) {
			if err := r.flushSettled(ctx, p); err != nil {
				return outcome{}, err
			}
			return r.completePending(ctx, s, p)
		}
		planned, err := r.planMore(ctx, s, p, items, r.planLimit(p, window))
		if err != nil {
			return outcome{}, err
		}
		if len(planned) > 0 || first {
			r.recordPlans(s, p, planned)
		}
		if err := r.recordRound(ctx, p, planned, unstarted, changed, first); err != nil {
			return outcome{}, err
		}
		first = false
		// Start what the window allows: items planned and not registered,
		// in order (those planned now among them).
		waiting := slices.Concat(unstarted, planned)
		start := r.startable(p, waiting, window)
		refused, err := r.launch(ctx, s, p, items, start)
		if err != nil {
			return outcome{}, err
		}
		if len(start) > 0 {
			fault("graph:after_start")
		}
		if refused {
			continue
		}
		running := r.running(p, waiting[len(start):])
		if len(running) == 0 {
			continue
		}
		if ended, err := hold.wait(ctx, running); err != nil {
			return outcome{}, err
		} else if ended {
			continue
		}
		suspended, err := r.suspendRound(ctx, p, running)
		if err != nil {
			return outcome{}, err
		}
		if suspended {
			r.w.metrics.suspended()
			r.log.Info("graph run waiting on children", "step", p.Step, "node", p.Node, "running", len(running))
			return outcome{kind: suspend, reason: registry.WaitingForChildren}, nil
		}
	}
}

// recordPlans records the step's start, or the items it planned now
// (step_started naming their children).
func (r *graphRun) recordPlans(s *stepRun, p *pendingStep, planned []string) {
	ev := transcript.StepStarted{Step: p.Step, Node: p.Node, Kind: s.n.Kind, Attempt: p.Attempt,
		StartedAt: p.StartedAt.Format(time.RFC3339Nano), Children: map[string]string{}}
	if a := s.n.Action; a != nil {
		ev.Action = &transcript.StepAction{Tool: a.Tool, Directive: a.Directive, Graph: a.Graph}
	}
	for _, i := range planned {
		ev.Children[i] = p.Children[i]
	}
	r.emit(transcript.TypeStepStarted, ev)
}

// recordRound makes a round durable when it must be: new plans (before
// any of them starts), the step's first round, settled items once
// graphProgressEvery has passed, or any settled while the step stops.
func (r *graphRun) recordRound(ctx context.Context, p *pendingStep, planned, unstarted []string, changed, first bool) error {
	// Items settled and not yet durable, in this round or one before it
	// (a held run's progress comes due while it waits: childHold).
	settled := len(r.unflushed) > 0
	progress := settled && time.Since(r.checkpointed) >= graphProgressEvery
	if len(planned) == 0 && !first && !progress && (!changed || !p.Stopping) {
		return nil
	}
	if err := r.flushSettled(ctx, p); err != nil {
		return err
	}
	if running := r.running(p, unstarted); len(running) > 0 {
		r.emit(transcript.TypeGraphWaiting, transcript.GraphWaiting{WaitingFor: registry.WaitingForChildren, Threads: running, Step: p.Step, Node: p.Node})
	}
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	if settled {
		fault("graph:after_item")
	}
	if len(planned) > 0 {
		fault("graph:after_plan")
	}
	return nil
}

// startable are the first of waiting (items planned, not registered, in
// order) that the window has room for; none while the step stops.
func (r *graphRun) startable(p *pendingStep, waiting []string, window int) []string {
	if p.Stopping {
		return nil
	}
	free := max(0, window-len(r.running(p, waiting)))
	return waiting[:min(free, len(waiting))]
}

// suspendRound suspends the run on its running children, after making
// what the round recorded (children started or refused, items settled)
// durable: a suspension writes no segment, and the next activation
// begins from the last one. false when it did not suspend (a child ended
// meanwhile, or a chain moved on): the caller settles again.
func (r *graphRun) suspendRound(ctx context.Context, p *pendingStep, running []string) (bool, error) {
	if len(r.unflushed) > 0 || r.tw.Pending() > 0 {
		if err := r.flushSettled(ctx, p); err != nil {
			return false, err
		}
		if err := r.checkpoint(ctx); err != nil {
			return false, err
		}
	}
	suspended, err := r.suspendOn(ctx, p, running)
	if errors.Is(err, registry.ErrChainMoved) {
		return false, nil
	}
	return suspended, err
}

// graphProgressEvery is how often a foreach's settled items are made
// durable while no new item is planned (its progress in the record and
// the transcript).
const graphProgressEvery = time.Second

// planLimit is how many of a child step's items may be planned and
// unsettled after this round's plans: none are planned while two windows
// are, then up to three. Plans go in batches of a window or more, each
// one segment, and a child that ends is replaced by an item already
// planned: most rounds start children without writing a segment.
func (r *graphRun) planLimit(p *pendingStep, window int) int {
	if len(r.running(p, nil)) >= 2*window {
		return 0
	}
	return 3 * window
}

// childHold is how a run whose children are all running waits for one
// to end in its activation (graphs.yaml hold_seconds) before it suspends:
// a child that ends is replaced at once, with no wake task to queue and
// no checkpoint to load. The wait for each end is bounded by hold_seconds
// and the activation's segment_seconds; while it lasts the run holds its
// worker slot and its lease. Nothing is made durable for the hold: a
// crash in it recovers from the last checkpoint, as one between rounds
// does.
type childHold struct {
	r   *graphRun
	sub *registry.Subscription
}

// wait waits until one of running (or the thread its chain moved on to)
// ends: true when one did, or may have (the subscription has just begun,
// so an end before it would be missed: the caller settles again); false
// when the hold is over first, or there is none.
func (h *childHold) wait(ctx context.Context, running []string) (bool, error) {
	r := h.r
	d := min(r.proj.Graphs.HoldTime(), time.Until(r.began.Add(r.proj.Graphs.SegmentTime())))
	if d <= 0 {
		return false, nil
	}
	if h.sub == nil {
		sub, err := r.reg.Subscribe(ctx)
		if err != nil {
			// The suspension that follows tells Redis trouble apart.
			r.log.Warn("graph run cannot watch its children; suspending", "error", err)
			return false, nil
		}
		h.sub = sub
		return true, nil
	}
	watch := make(map[string]bool, 2*len(running))
	for _, id := range running {
		watch[id] = true
		if t, ok := r.terminal[id]; ok {
			watch[t] = true
		}
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	// Items settled and not yet durable are made so once their progress
	// is due (recordRound), so a held run's items_done is as live as a
	// woken one's.
	var due <-chan time.Time
	if len(r.unflushed) > 0 {
		t := time.NewTimer(max(0, time.Until(r.checkpointed.Add(graphProgressEvery))))
		defer t.Stop()
		due = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return false, context.Cause(ctx)
		case <-due:
			return true, nil
		case <-timer.C:
			return false, nil
		case ev, ok := <-h.sub.C:
			if !ok {
				return false, nil
			}
			if !watch[ev.ThreadID] || !thread.Status(ev.Status).Terminal() {
				continue
			}
			// The ends that come within holdCoalesce are settled in the
			// same round: one checkpoint for a burst of them.
			batch := time.NewTimer(holdCoalesce)
			defer batch.Stop()
			for {
				select {
				case <-ctx.Done():
					return false, context.Cause(ctx)
				case <-h.sub.C:
				case <-batch.C:
					return true, nil
				}
			}
		}
	}
}

// holdCoalesce is how long a held run, woken by a child's end, waits for
// more ends before it settles them: a foreach of quick children settles
// them in bursts, one checkpoint each, not one per child; a child that
// ran for seconds waits 20 ms more for its successor.
const holdCoalesce = 20 * time.Millisecond

// close ends the hold's subscription.
func (h *childHold) close() {
	if h.sub != nil {
		_ = h.sub.Close()
	}
}

// window is how many of a child step's children run at once.
func (r *graphRun) window(s *stepRun, p *pendingStep) int {
	if p.Kind == pendingForeach && s.n.Parallel {
		return r.g.Concurrency(s.n)
	}
	if p.Kind == pendingWait {
		return p.Items
	}
	return 1
}

// running are the step's children that have not settled, in item
// order, leaving out the items of notStarted (planned, not registered).
func (r *graphRun) running(p *pendingStep, notStarted []string) []string {
	skip := make(map[string]bool, len(notStarted))
	for _, k := range notStarted {
		skip[k] = true
	}
	var out []string
	for _, i := range sortedIndexes(p.Children) {
		if _, ok := p.Slots[i]; !ok && !skip[i] {
			out = append(out, p.Children[i])
		}
	}
	return out
}

// suspendOn suspends the run on the chains of ids: until any ends for a
// foreach's window or a wait of mode any, else until all have.
func (r *graphRun) suspendOn(ctx context.Context, p *pendingStep, ids []string) (bool, error) {
	targets := make([]registry.WaitTarget, 0, len(ids))
	for _, id := range ids {
		term, ok := r.terminal[id]
		if !ok {
			var err error
			if term, err = r.reg.ResolveChain(ctx, id); err != nil {
				return false, err
			}
		}
		targets = append(targets, registry.WaitTarget{Root: id, Terminal: term})
	}
	anyOf := p.Kind == pendingForeach || (p.Kind == pendingWait && r.g.Node(p.Node).Mode == "any")
	suspend := r.acts.Suspend
	if anyOf {
		suspend = r.acts.SuspendAny
	}
	suspended, seq, err := suspend(ctx, r.id(), r.version, targets)
	if wn := (*registry.WakeNowError)(nil); errors.As(err, &wn) {
		err = r.o.EnqueueWake(ctx, wn.Wake)
	}
	if err != nil {
		return false, err
	}
	if suspended {
		r.version = seq
	}
	return suspended, nil
}

// settle records the children that have ended: their slots (results in
// the snapshot), foreach_item_completed. unstarted are planned children
// not registered (their start did not happen: started again, adopting
// any that did).
func (r *graphRun) settle(ctx context.Context, s *stepRun, p *pendingStep) (changed bool, unstarted []string, err error) {
	open := openItems(p)
	if len(open) == 0 {
		return false, nil, nil
	}
	statuses, ended, err := r.endedChildren(ctx, p, open)
	if err != nil {
		return false, nil, err
	}
	r.terminal = make(map[string]string, len(open))
	for _, i := range open {
		id := p.Children[i]
		st, registered := statuses[id]
		rec, running, err := r.chainEnd(ctx, p, id, st, registered, ended[id])
		if err != nil {
			return changed, nil, err
		}
		var sl slot
		var result any
		switch {
		case running || rec != nil && (!rec.Status.Terminal() || rec.Status == thread.StatusContinued):
			continue
		case rec == nil && p.Kind != pendingWait:
			// Planned, and its start did not happen (or did not last):
			// started again, adopting the child should it exist after all.
			unstarted = append(unstarted, i)
			continue
		case rec == nil:
			sl = slot{Status: "error", Code: "thread_lost", Message: "thread " + id + " is not in the registry and left no durable transcript to restore it from", ThreadID: id}
		default:
			sl, result = endedSlot(rec), childResult(rec)
		}
		if err := r.settleSlot(ctx, s, p, i, sl, result); err != nil {
			return changed, nil, err
		}
		changed = true
	}
	return changed, unstarted, nil
}

// openItems are the items of p planned and not settled, in order.
func openItems(p *pendingStep) []string {
	var open []string
	for _, i := range sortedIndexes(p.Children) {
		if _, ok := p.Slots[i]; !ok {
			open = append(open, i)
		}
	}
	return open
}

// endedChildren reads the children of the open items in one round trip:
// the status of each registered one, and the records of those that
// ended, by id. A child that handed off lives on in its chain, whose end
// is read apart (chainEnd).
func (r *graphRun) endedChildren(ctx context.Context, p *pendingStep, open []string) (map[string]thread.Status, map[string]*registry.Record, error) {
	ids := make([]string, len(open))
	for j, i := range open {
		ids[j] = p.Children[i]
	}
	statuses, err := r.reg.Statuses(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	var ended []string
	for _, id := range ids {
		if st, ok := statuses[id]; ok && st.Terminal() {
			ended = append(ended, id)
		}
	}
	recs, err := r.reg.GetMany(ctx, ended)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]*registry.Record, len(recs))
	for _, rec := range recs {
		byID[rec.ThreadID] = rec
	}
	return statuses, byID, nil
}

// chainEnd is where the chain of child id stands: the record of its
// terminal thread, which r.terminal keeps as what a suspension watches
// (ErrChainMoved, should it move on meanwhile), or nil when the child is
// not in the registry. st is the child's status if it is registered, rec
// its record if it ended. running: registered and running. A child that
// an activation started and died before recording is recorded now; a
// wait's thread that Redis lost is restored from the store, if it left a
// transcript there.
func (r *graphRun) chainEnd(ctx context.Context, p *pendingStep, id string, st thread.Status, registered bool, rec *registry.Record) (_ *registry.Record, running bool, err error) {
	if registered && !r.spawned[id] {
		// Started by an activation that died before recording it.
		r.emitSpawned(&graph.Action{Directive: thread.DirectiveFromID(id)}, &registry.Record{ThreadID: id}, false)
	}
	if registered && rec == nil {
		// Registered and running: its chain is where it is.
		r.terminal[id] = id
		if !st.Terminal() {
			return nil, true, nil
		}
	}
	if !registered && p.Kind == pendingWait {
		// A thread an earlier step started, which Redis lost (a
		// failover short of its last writes): restored from the
		// store, or thread_lost when it left nothing there.
		got, err := restoreLost(ctx, r.o, r.log, id, r.id())
		if err != nil && !errors.Is(err, registry.ErrNotFound) {
			return nil, false, err
		}
		rec = got
	}
	if rec != nil && rec.Status == thread.StatusContinued {
		if rec, err = r.chainTerminal(ctx, id); err != nil {
			return nil, false, err
		}
	}
	if rec != nil {
		r.terminal[id] = rec.ThreadID
	}
	return rec, false, nil
}

// chainTerminal is the record of the terminal thread of the chain of a
// child that handed off; nil when Redis has none.
func (r *graphRun) chainTerminal(ctx context.Context, id string) (*registry.Record, error) {
	term, err := r.reg.ResolveChain(ctx, id)
	if err != nil {
		return nil, err
	}
	rec, err := r.reg.Get(ctx, term)
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return nil, err
	}
	return rec, nil
}

// endedSlot is the slot of an item whose child ended: ok when it
// completed, else an error with the child's error code and message (its
// status when it has none).
func endedSlot(rec *registry.Record) slot {
	sl := slot{Status: "ok", ThreadID: rec.ThreadID}
	if rec.Status != thread.StatusCompleted {
		sl.Status, sl.Code, sl.Message = "error", string(rec.Status), "the child ended "+string(rec.Status)
		if rec.Error != nil {
			sl.Code, sl.Message = rec.Error.Code, rec.Error.Message
		}
		if sl.Code == "" {
			sl.Code = string(rec.Status)
		}
	}
	return sl
}

// settleSlot records item i's end.
func (r *graphRun) settleSlot(_ context.Context, s *stepRun, p *pendingStep, i string, sl slot, result any) error {
	if result != nil {
		// As JSON values: what a restore reads back, so the step sees the
		// same result whichever activation completes it.
		v, b, err := plainJSON(result)
		if err != nil {
			return err
		}
		sl.SHA = sha256Hex(b)
		r.results[i] = v
	}
	p.Slots[i] = sl
	if sl.Status == "error" && p.Kind == pendingForeach && s.n.OnItemError != "continue" {
		p.Stopping = true
	}
	r.unflushed = append(r.unflushed, i)
	return nil
}

// flushSettled records the items settled since the last flush: their
// results as one content-addressed object (one write per wake, not per
// item), then a foreach_item_completed each, naming it. A restore
// rebuilds the step's slots from these events; they go into the
// segment of the checkpoint that follows.
func (r *graphRun) flushSettled(ctx context.Context, p *pendingStep) error {
	if len(r.unflushed) == 0 {
		return nil
	}
	chunk := map[string]any{}
	for _, i := range r.unflushed {
		if v, ok := r.results[i]; ok && p.Slots[i].SHA != "" {
			chunk[i] = v
		}
	}
	addr := ""
	if len(chunk) > 0 {
		var err error
		if addr, err = putResult(ctx, r.store, r.id(), chunk); err != nil {
			return err
		}
	}
	for _, i := range r.unflushed {
		sl := p.Slots[i]
		if sl.SHA != "" {
			sl.Chunk = addr
			p.Slots[i] = sl
		}
		idx, _ := strconv.Atoi(i)
		ev := transcript.ForeachItemCompleted{Step: p.Step, Node: p.Node, Index: idx, Status: sl.Status, ThreadID: sl.ThreadID,
			ResultSHA256: sl.SHA, Results: sl.Chunk}
		if sl.Status == "error" {
			ev.Error = &transcript.Error{Code: sl.Code, Message: sl.Message}
		}
		r.emit(transcript.TypeForeachItemCompleted, ev)
	}
	r.unflushed = nil
	return nil
}

// childResult is what a step sees of a child that ended: the terminal
// thread of its chain (a graph child: its run).
func childResult(rec *registry.Record) map[string]any {
	m := childSummary(rec)
	if rec.IsGraph() {
		m["run_id"] = rec.ThreadID
		m["suppressed_errors"] = rec.SuppressedErrors
		delete(m, "directive")
		m["graph"] = rec.Directive
	}
	return m
}

// pendingDone reports whether the step in flight has settled.
// notStarted are planned items not registered: a stopping foreach waits
// only for the children it started.
func (r *graphRun) pendingDone(s *stepRun, p *pendingStep, notStarted []string) bool {
	switch {
	case p.Kind == pendingWait && s.n.Mode == "any":
		return len(p.Slots) > 0
	case p.Stopping:
		return len(r.running(p, notStarted)) == 0
	}
	return len(p.Slots) >= p.Items
}

// planMore plans items until limit are planned and unsettled (an
// action's one child, or a foreach's items, a window ahead of those
// running), returning their indexes; the ids are recorded in p.Children.
func (r *graphRun) planMore(ctx context.Context, s *stepRun, p *pendingStep, items []any, limit int) ([]string, error) {
	if p.Kind == pendingWait || p.Stopping {
		return nil, nil
	}
	if p.Kind == pendingChild {
		limit = 1
	}
	free := limit - len(r.running(p, nil))
	var planned []string
	for i := p.NextItem; i < p.Items && free > 0; i++ {
		k := strconv.Itoa(i)
		if _, ok := p.Children[k]; ok {
			continue
		}
		if _, ok := p.Slots[k]; ok {
			continue
		}
		req, err := r.itemRequest(s, p, items, i)
		if err != nil {
			var se *graph.StepError
			if errors.As(err, &se) || !isInfra(err) {
				if err := r.settleSlot(ctx, s, p, k, slot{Status: "error", Code: asStepError(err).Code, Message: err.Error()}, nil); err != nil {
					return nil, err
				}
				p.NextItem = i + 1
				if p.Kind == pendingChild || p.Stopping {
					return planned, nil
				}
				continue
			}
			return nil, err
		}
		p.Children[k] = req.ID
		planned = append(planned, k)
		free--
		p.NextItem = i + 1
	}
	return planned, nil
}

// itemRequest is the start of item i (a child action: item 0).
func (r *graphRun) itemRequest(s *stepRun, p *pendingStep, items []any, i int) (orchestrator.StartRequest, error) {
	scope := s.scope
	if p.Kind == pendingForeach {
		scope = itemScope(s, items, i)
	}
	a, err := r.resolveAction(s.n.Action, scope)
	if err != nil {
		return orchestrator.StartRequest{}, err
	}
	if !graph.Permitted(r.rec.Capabilities, a) {
		return orchestrator.StartRequest{}, stepErr(graph.CodePermissionDenied, "starting %s needs capability %s, which this run does not hold", a.ID(), a.Capability())
	}
	inputs, err := graph.Params(a.Inputs, scope)
	if err != nil {
		return orchestrator.StartRequest{}, err
	}
	req, err := r.childRequest(a, inputs, seed(p.Step, i, p.Attempt))
	if err != nil {
		return req, stepErr("invalid_limits", "%v", err)
	}
	return req, nil
}

// launch starts (or adopts) the planned children of indexes; a refused
// start settles its item. refused reports whether any was.
func (r *graphRun) launch(ctx context.Context, s *stepRun, p *pendingStep, items []any, indexes []string) (refused bool, err error) {
	type started struct {
		k   string
		req orchestrator.StartRequest
		rec *registry.Record
		err error
	}
	out := make([]started, len(indexes))
	for j, k := range indexes {
		i, _ := strconv.Atoi(k)
		req, err := r.itemRequest(s, p, items, i)
		if err != nil {
			return false, err
		}
		// The plan is durable: an id computed otherwise now would start
		// a twin.
		req.ID = p.Children[k]
		out[j] = started{k: k, req: req}
	}
	// Starts are a few round trips each: a window's worth go at once.
	sem := make(chan struct{}, launchParallel)
	var wg sync.WaitGroup
	for j := range out {
		wg.Add(1)
		sem <- struct{}{}
		go func(st *started) {
			defer func() { <-sem; wg.Done() }()
			st.rec, st.err = r.o.Start(ctx, st.req)
		}(&out[j])
	}
	wg.Wait()
	for _, st := range out {
		a := &graph.Action{Directive: st.req.Directive}
		if st.req.Graph {
			a = &graph.Action{Graph: st.req.Directive}
		}
		if st.err != nil {
			if isInfra(st.err) {
				return false, st.err
			}
			r.emitRefused(a, st.err)
			se := refusal(st.err)
			if err := r.settleSlot(ctx, s, p, st.k, slot{Status: "error", Code: se.Code, Message: se.Message}, nil); err != nil {
				return false, err
			}
			refused = true
			continue
		}
		r.emitSpawned(a, st.rec, false)
	}
	return refused, nil
}

// launchParallel bounds the starts one activation makes at once.
const launchParallel = 16

// refusal is a refused start as a step failure, with the limit's code.
func refusal(err error) *graph.StepError {
	obj := errorObject(err)
	return &graph.StepError{Code: obj["code"].(string), Message: err.Error()}
}

func (r *graphRun) emitSpawned(a *graph.Action, rec *registry.Record, async bool) {
	if r.spawned[rec.ThreadID] {
		return
	}
	if r.spawned == nil {
		r.spawned = map[string]bool{}
	}
	r.spawned[rec.ThreadID] = true
	r.emit(transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: rec.ThreadID, Directive: a.ID(), Async: async})
}

func (r *graphRun) emitRefused(a *graph.Action, err error) {
	r.emit(transcript.TypeChildRefused, transcript.ChildRefused{Directive: a.ID(), Code: errorObject(err)["code"].(string), Message: err.Error()})
	r.log.Info("child refused", "child", a.ID(), "error", err)
}

// completePending completes a child step from its settled items.
func (r *graphRun) completePending(ctx context.Context, s *stepRun, p *pendingStep) (outcome, error) {
	order := sortedIndexes(p.Children)
	for _, i := range order {
		s.threadIDs = append(s.threadIDs, p.Children[i])
	}
	if p.Kind == pendingChild {
		sl := p.Slots["0"]
		if sl.Status != "ok" {
			return r.complete(ctx, s, nil, &graph.StepError{Code: sl.Code, Message: sl.Message, ThreadID: sl.ThreadID})
		}
		res, err := r.itemResult(ctx, "0", sl)
		if err != nil {
			return outcome{}, err
		}
		return r.complete(ctx, s, res, nil)
	}
	results := make([]any, p.Items)
	var errs []map[string]any
	failed, first := 0, (*slot)(nil)
	for i := 0; i < p.Items; i++ {
		sl, ok := p.Slots[strconv.Itoa(i)]
		if !ok {
			continue
		}
		if sl.Status == "ok" {
			res, err := r.itemResult(ctx, strconv.Itoa(i), sl)
			if err != nil {
				return outcome{}, err
			}
			results[i] = res
			continue
		}
		failed++
		if first == nil {
			first = &sl
		}
		e := map[string]any{"index": i, "code": sl.Code, "message": sl.Message}
		if sl.ThreadID != "" {
			e["thread_id"] = sl.ThreadID
		}
		errs = append(errs, e)
	}
	s.items = [3]int{len(p.Slots), p.Items, failed}
	res := foreachResult(results, errs, failed)
	res["succeeded"] = len(p.Slots) - failed
	onError := s.n.OnItemError
	if p.Kind == pendingWait {
		onError = s.n.OnChildError
	}
	switch {
	case failed > 0 && onError != "continue":
		code := graph.CodeForeachItemFailed
		if p.Kind == pendingWait {
			code = "wait_child_failed"
		}
		return r.complete(ctx, s, nil, &graph.StepError{Code: code, Message: fmt.Sprintf("item failed (%s): %s", first.Code, first.Message), ThreadID: first.ThreadID})
	case failed > 0 && failed == len(p.Slots) && p.Kind == pendingForeach:
		return r.complete(ctx, s, nil, &graph.StepError{Code: graph.CodeForeachAllFailed, Message: fmt.Sprintf("all %d items failed; the first (%s): %s", failed, first.Code, first.Message)})
	}
	if p.Kind == pendingForeach {
		r.emit(transcript.TypeForeachCompleted, transcript.ForeachCompleted{Step: p.Step, Node: p.Node, Items: p.Items, Succeeded: p.Items - failed, Failed: failed})
	}
	return r.complete(ctx, s, res, nil)
}

// itemResult is settled item i's result: this activation's, or its
// stored object.
func (r *graphRun) itemResult(ctx context.Context, i string, sl slot) (any, error) {
	if v, ok := r.results[i]; ok {
		return v, nil
	}
	if sl.SHA == "" {
		return nil, nil
	}
	chunk, err := r.resultChunk(ctx, r.id(), sl.Chunk)
	if err != nil {
		return nil, err
	}
	v, ok := chunk[i]
	if !ok {
		return nil, fmt.Errorf("%w: item %s's result is not in %s", errStateInvalid, i, sl.Chunk)
	}
	if b, _ := json.Marshal(v); sha256Hex(b) != sl.SHA {
		return nil, fmt.Errorf("%w: item %s's result in %s is not the one its event names", errStateInvalid, i, sl.Chunk)
	}
	r.results[i] = v
	return v, nil
}

// resultChunk reads a stored object of item results of run id (cached
// for the activation).
func (r *graphRun) resultChunk(ctx context.Context, id, addr string) (map[string]any, error) {
	key := id + "/" + addr
	if c, ok := r.chunks[key]; ok {
		return c, nil
	}
	v, err := getResult(ctx, r.store, id, addr)
	if err != nil {
		return nil, err
	}
	c, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: %s of %s is not an object of item results", errStateInvalid, addr, id)
	}
	if r.chunks == nil {
		r.chunks = map[string]map[string]any{}
	}
	r.chunks[key] = c
	return c, nil
}

// startWait starts a wait node: its children, as the step's.
func (r *graphRun) startWait(ctx context.Context, s *stepRun) (outcome, error) {
	v, err := graph.Value(s.n.Threads, s.scope)
	if err != nil {
		return r.complete(ctx, s, nil, err)
	}
	list, err := graph.ForeachItems(v, r.proj.Graphs.MaxForeachItems)
	if err != nil {
		return r.complete(ctx, s, nil, stepErr("wait_not_list", "wait %s: threads must be a list of thread or run ids: %v", s.n.Name, err))
	}
	p := &pendingStep{Step: s.step, Node: s.n.Name, Kind: pendingWait, Attempt: s.attempt, StartedAt: r.o.Now().UTC(), Items: len(list),
		Children: map[string]string{}, Slots: map[string]slot{}}
	for i, x := range list {
		id, ok := x.(string)
		if !ok || id == "" {
			return r.complete(ctx, s, nil, stepErr("wait_not_list", "wait %s: item %d is not a thread id", s.n.Name, i))
		}
		rec, err := r.reg.Get(ctx, id)
		if err == nil && rec.ParentID != r.id() {
			return r.complete(ctx, s, nil, stepErr("wait_not_child", "wait %s: %s is not a child of this run", s.n.Name, id))
		}
		if err != nil && !errors.Is(err, registry.ErrNotFound) {
			return outcome{}, err
		}
		p.Children[strconv.Itoa(i)] = id
		p.Threads = append(p.Threads, id)
	}
	if len(list) == 0 {
		return r.complete(ctx, s, foreachResult(nil, nil, 0), nil)
	}
	r.cp.Pending, r.results = p, map[string]any{}
	return r.advancePending(ctx, s, true)
}

// requestApproval starts an approval node: a pending call
// "graph:approval" people decide with approve and deny.
func (r *graphRun) requestApproval(ctx context.Context, s *stepRun) (outcome, error) {
	prompt, err := graph.String(s.n.Prompt, s.scope)
	if err != nil {
		return r.complete(ctx, s, nil, err)
	}
	show, err := graph.Value(graph.DeepCopy(s.n.Show), s.scope)
	if err != nil {
		return r.complete(ctx, s, nil, err)
	}
	input, _ := json.Marshal(map[string]any{"prompt": prompt, "show": show})
	onTimeout := s.n.OnTimeout
	if onTimeout == "" {
		onTimeout = registry.DecisionDeny
	}
	return r.pendApproval(ctx, s, approvalTool, input, s.n.Timeout, onTimeout)
}

// approvalTool is the tool name of an approval node's pending call.
const approvalTool = "graph:approval"

// requestToolApproval gates a tool action on a person's decision
// (approvals.yaml), as a thread's tool call is.
func (r *graphRun) requestToolApproval(ctx context.Context, s *stepRun, a *graph.Action, timeout time.Duration, onTimeout string) (outcome, error) {
	params, err := graph.Params(a.Params, s.scope)
	if err != nil {
		return r.complete(ctx, s, nil, err)
	}
	input, _ := json.Marshal(params)
	if onTimeout == "" {
		onTimeout = registry.DecisionDeny
	}
	return r.pendApproval(ctx, s, a.Tool, input, timeout, onTimeout)
}

// pendApproval records a pending call and waits for its decision.
func (r *graphRun) pendApproval(ctx context.Context, s *stepRun, tool string, input json.RawMessage, timeout time.Duration, onTimeout string) (outcome, error) {
	now := r.o.Now().UTC()
	pa := &registry.PendingApproval{CallID: strconv.Itoa(s.step), RequestID: newToken(), Tool: tool, Input: input, RequestedAt: now, OnTimeout: onTimeout}
	ev := transcript.ApprovalRequested{CallID: pa.CallID, RequestID: pa.RequestID, Tool: tool, Input: input}
	if timeout > 0 {
		pa.Deadline = now.Add(timeout)
		ev.Deadline, ev.OnTimeout = pa.Deadline.Format(time.RFC3339), onTimeout
	}
	r.cp.Pending = &pendingStep{Step: s.step, Node: s.n.Name, Kind: pendingApproval, Attempt: s.attempt, StartedAt: now, CallID: pa.CallID, Approval: pa}
	ev0 := transcript.StepStarted{Step: s.step, Node: s.n.Name, Kind: s.n.Kind, Attempt: s.attempt, StartedAt: now.Format(time.RFC3339Nano)}
	if tool != approvalTool {
		ev0.Action = &transcript.StepAction{Tool: tool}
	}
	r.emit(transcript.TypeStepStarted, ev0)
	r.emit(transcript.TypeApprovalRequested, ev)
	return r.advanceApproval(ctx, s, true)
}

// advanceApproval completes an approval once decided (or timed out),
// else suspends the run for it.
func (r *graphRun) advanceApproval(ctx context.Context, s *stepRun, first bool) (outcome, error) {
	p := r.cp.Pending
	pa := p.Approval
	decisions, err := r.acts.Decisions(ctx, r.id())
	if err != nil {
		return outcome{}, err
	}
	d, ok := decisions[pa.CallID]
	if ok && d.RequestID != "" && pa.RequestID != "" && d.RequestID != pa.RequestID {
		ok = false // a decision of another request
	}
	now := r.o.Now()
	if !ok && !pa.Deadline.IsZero() && !now.Before(pa.Deadline) {
		d, ok = registry.Decision{Decision: pa.OnTimeout, By: "timeout", Reason: "no decision within the approval's timeout", At: now.UTC()}, true
	}
	if !ok {
		if first {
			r.emit(transcript.TypeGraphWaiting, transcript.GraphWaiting{WaitingFor: registry.WaitingForApproval, CallID: pa.CallID, Step: p.Step, Node: p.Node})
			if err := r.checkpoint(ctx); err != nil {
				return outcome{}, err
			}
		}
		seq, open, err := r.acts.SuspendForApproval(ctx, r.id(), r.version, []registry.PendingApproval{*pa})
		if err != nil {
			return outcome{}, err
		}
		r.version = seq
		if open == 0 {
			return outcome{kind: suspend}, r.o.EnqueueWake(ctx, registry.Wake{ThreadID: r.id(), Seq: seq})
		}
		if !pa.Deadline.IsZero() {
			if err := r.enq.Enqueue(ctx, queue.Activation{ThreadID: r.id(), Reason: "timeout"}, seq, r.rec.Queue, asynqProcessAt(pa.Deadline)); err != nil {
				return outcome{}, err
			}
		}
		r.w.metrics.suspended()
		r.log.Info("graph run waiting for approval", "step", p.Step, "node", p.Node)
		return outcome{kind: suspend, reason: registry.WaitingForApproval}, nil
	}
	r.emit(transcript.TypeApprovalDecided, transcript.ApprovalDecided{CallID: pa.CallID, Tool: pa.Tool, Decision: d.Decision, By: d.By, Reason: d.Reason})
	if err := r.acts.ClearApprovals(ctx, r.id()); err != nil {
		return outcome{}, err
	}
	approved := d.Decision == registry.DecisionApprove
	if pa.Tool == approvalTool {
		return r.complete(ctx, s, map[string]any{"approved": approved, "reason": d.Reason, "by": d.By,
			"decided_at": d.At.UTC().Format(time.RFC3339)}, nil)
	}
	if !approved {
		msg := "denied by " + d.By
		if d.Reason != "" {
			msg += ": " + d.Reason
		}
		return r.complete(ctx, s, nil, stepErr(graph.CodeApprovalDenied, "%s", msg))
	}
	var params map[string]any
	_ = json.Unmarshal(pa.Input, &params)
	a := &graph.Action{Tool: pa.Tool, Params: params}
	res, se, err := r.runTool(ctx, s, a, s.scope, pa.CallID)
	if err != nil {
		return outcome{}, err
	}
	if se != nil {
		return r.complete(ctx, s, nil, se)
	}
	return r.complete(ctx, s, res, nil)
}

// plainJSON is v decoded from its JSON (maps, lists, float64s), and that
// value's JSON (sorted keys): the form a stored result is read back in.
func plainJSON(v any) (any, []byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, nil, err
	}
	b, err = json.Marshal(out)
	return out, b, err
}

// sha256Hex is the hex SHA-256 of b.
func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}
