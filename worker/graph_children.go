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

// seed names a planned child within the run.
func seed(step, item, attempt int) string {
	return fmt.Sprintf("step/%d/item/%d/attempt/%d", step, item, attempt)
}

// planChildren starts a child step: an action's one child (sync or
// async).
func (r *graphRun) planChildren(ctx context.Context, s *stepRun, kind string, items int) (outcome, error) {
	a, err := r.actions.resolve(s.n.Action, s.scope)
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
		rec, err := r.actions.start(ctx, a, inputs, seed(s.step, 0, s.attempt))
		if err != nil {
			if isInfra(err) {
				return outcome{}, err
			}
			r.emitRefused(a, err)
			return r.complete(ctx, s, nil, refusal(err))
		}
		r.chains.started(a, rec, true)
		s.threadIDs = []string{rec.ThreadID}
		key := "thread_id"
		if a.Graph != "" {
			key = "run_id"
		}
		return r.complete(ctx, s, map[string]any{key: rec.ThreadID, "status": "running"}, nil)
	}
	p := &pendingStep{Step: s.step, Node: s.n.Name, Kind: kind, Attempt: s.attempt, StartedAt: r.o.Now().UTC(), Items: items,
		Children: map[string]string{}, Slots: map[string]slot{}}
	r.cp.Pending = p
	r.items.clear()
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
		if _, err := r.proj.Graph(s.n.Action.Tool); err != nil || r.actions.has(s.n.Action.Tool) {
			return r.foreachTools(ctx, s, items)
		}
	}
	return r.planChildren(ctx, s, pendingForeach, len(items))
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
	results, errs, err := r.runToolItems(ctx, s, items)
	if err != nil {
		return outcome{}, err
	}
	if stopRequested(ctx) {
		return outcome{}, context.Cause(ctx)
	}
	return r.completeToolItems(ctx, s, results, errs)
}

// runToolItems runs the tool items of a foreach, up to its concurrency
// at once: each one's result, or its failure. Unless the foreach goes on
// after a failed item, the first failure stops the items not yet begun;
// an infrastructure error stops them all and is returned.
func (r *graphRun) runToolItems(ctx context.Context, s *stepRun, items []any) ([]any, []*graph.StepError, error) {
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
			res, se, err := r.runToolItem(ictx, s, items, i)
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
	return results, errs, infra
}

// runToolItem runs tool item i of a foreach: its result, its failure as
// the step sees it, or an infrastructure error.
func (r *graphRun) runToolItem(ctx context.Context, s *stepRun, items []any, i int) (any, *graph.StepError, error) {
	sc := itemScope(s, items, i)
	a, err := r.actions.resolve(s.n.Action, sc)
	if err != nil {
		return nil, asStepError(err), nil
	}
	return r.actions.run(ctx, s, a, sc, fmt.Sprintf("step-%d-item-%d", s.step, i))
}

// completeToolItems completes a foreach of tool items from their results
// and failures (errs, by item): it fails when an item failed and the
// foreach stops at a failure, or when every item failed.
func (r *graphRun) completeToolItems(ctx context.Context, s *stepRun, results []any, errs []*graph.StepError) (outcome, error) {
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
	switch {
	case failed > 0 && s.n.OnItemError != "continue":
		return r.complete(ctx, s, nil, &graph.StepError{Code: graph.CodeForeachItemFailed, Message: "item failed: " + first.Message, ThreadID: first.ThreadID})
	case failed == len(results):
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
	rd := &pendingRound{s: s, p: p, items: items, window: r.window(s, p), hold: &childHold{r: r}, first: first}
	defer rd.hold.close()
	for round := 0; ; round++ {
		if round > 100000 {
			return outcome{}, fmt.Errorf("graph run %s: step %d does not settle", r.id(), p.Step)
		}
		out, done, err := r.advanceRound(ctx, rd)
		if err != nil || done {
			return out, err
		}
		rd.first = false
	}
}

// pendingRound is what the rounds of advancePending share: the step, its
// items (a foreach's), its window, the hold on its children, and whether
// the round is the step's first.
type pendingRound struct {
	s      *stepRun
	p      *pendingStep
	items  []any
	window int
	hold   *childHold
	first  bool
}

// advanceRound is one round of a child step: settle the children that
// ended (completing the step once all have), plan and record more, start
// what the window allows, then hold for an end, or suspend. done when
// the round ended the activation's part in the step (completed, or
// suspended); false to go round again.
func (r *graphRun) advanceRound(ctx context.Context, rd *pendingRound) (_ outcome, done bool, _ error) {
	s, p := rd.s, rd.p
	changed, unstarted, err := r.settle(ctx, s, p)
	if err != nil {
		return outcome{}, true, err
	}
	if p.done(s, unstarted) {
		if err := r.items.flush(ctx, p); err != nil {
			return outcome{}, true, err
		}
		out, err := r.completePending(ctx, s, p)
		return out, true, err
	}
	planned, err := r.planMore(ctx, s, p, rd.items, p.planLimit(rd.window))
	if err != nil {
		return outcome{}, true, err
	}
	if len(planned) > 0 || rd.first {
		r.recordPlans(s, p, planned)
	}
	if err := r.recordRound(ctx, p, planned, unstarted, changed, rd.first); err != nil {
		return outcome{}, true, err
	}
	running, err := r.startRound(ctx, rd, slices.Concat(unstarted, planned))
	if err != nil || len(running) == 0 {
		return outcome{}, err != nil, err
	}
	if ended, err := rd.hold.wait(ctx, running); err != nil || ended {
		return outcome{}, err != nil, err
	}
	suspended, err := r.suspendRound(ctx, p, running)
	if err != nil || !suspended {
		return outcome{}, err != nil, err
	}
	r.w.metrics.suspended()
	r.log.Info("graph run waiting on children", "step", p.Step, "node", p.Node, "running", len(running))
	return outcome{kind: suspend, reason: registry.WaitingForChildren}, true, nil
}

// startRound starts what the window allows of waiting (items planned and
// not registered, in order), and returns the children running after it;
// none when a start was refused, so that the round settles its item
// again at once.
func (r *graphRun) startRound(ctx context.Context, rd *pendingRound, waiting []string) ([]string, error) {
	p := rd.p
	start := p.startable(waiting, rd.window)
	refused, err := r.launch(ctx, rd.s, p, rd.items, start)
	if err != nil {
		return nil, err
	}
	if len(start) > 0 {
		fault("graph:after_start")
	}
	if refused {
		return nil, nil
	}
	return p.running(waiting[len(start):]), nil
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
	settled := r.items.dirty()
	progress := settled && time.Since(r.checkpointed) >= graphProgressEvery
	if len(planned) == 0 && !first && !progress && (!changed || !p.Stopping) {
		return nil
	}
	if err := r.items.flush(ctx, p); err != nil {
		return err
	}
	if running := p.running(unstarted); len(running) > 0 {
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
func (p *pendingStep) startable(waiting []string, window int) []string {
	if p.Stopping {
		return nil
	}
	free := max(0, window-len(p.running(waiting)))
	return waiting[:min(free, len(waiting))]
}

// suspendRound suspends the run on its running children, after making
// what the round recorded (children started or refused, items settled)
// durable: a suspension writes no segment, and the next activation
// begins from the last one. false when it did not suspend (a child ended
// meanwhile, or a chain moved on): the caller settles again.
func (r *graphRun) suspendRound(ctx context.Context, p *pendingStep, running []string) (bool, error) {
	if r.items.dirty() || r.tw.Pending() > 0 {
		if err := r.items.flush(ctx, p); err != nil {
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
func (p *pendingStep) planLimit(window int) int {
	if len(p.running(nil)) >= 2*window {
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
	watch := r.chains.watch(running)
	timer := time.NewTimer(d)
	defer timer.Stop()
	// Items settled and not yet durable are made so once their progress
	// is due (recordRound), so a held run's items_done is as live as a
	// woken one's.
	var due <-chan time.Time
	if r.items.dirty() {
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
			return h.coalesce(ctx)
		}
	}
}

// coalesce waits holdCoalesce after a child's end, so that the ends that
// come within it are settled in the same round: one checkpoint for a
// burst of them.
func (h *childHold) coalesce(ctx context.Context) (bool, error) {
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
func (p *pendingStep) running(notStarted []string) []string {
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
	targets, err := r.chains.targets(ctx, ids)
	if err != nil {
		return false, err
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
	statuses, ended, err := r.chains.read(ctx, p, open)
	if err != nil {
		return false, nil, err
	}
	for _, i := range open {
		id := p.Children[i]
		st, registered := statuses[id]
		rec, running, err := r.chains.end(ctx, p, id, st, registered, ended[id])
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
		if err := r.items.settle(s, p, i, sl, result); err != nil {
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

// done reports whether the step in flight has settled.
// notStarted are planned items not registered: a stopping foreach waits
// only for the children it started.
func (p *pendingStep) done(s *stepRun, notStarted []string) bool {
	switch {
	case p.Kind == pendingWait && s.n.Mode == "any":
		return len(p.Slots) > 0
	case p.Stopping:
		return len(p.running(notStarted)) == 0
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
	free := limit - len(p.running(nil))
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
				if err := r.items.settle(s, p, k, slot{Status: "error", Code: asStepError(err).Code, Message: err.Error()}, nil); err != nil {
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
	a, err := r.actions.resolve(s.n.Action, scope)
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
	req, err := r.actions.request(a, inputs, seed(p.Step, i, p.Attempt))
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
			if err := r.items.settle(s, p, st.k, slot{Status: "error", Code: se.Code, Message: se.Message}, nil); err != nil {
				return false, err
			}
			refused = true
			continue
		}
		r.chains.started(a, st.rec, false)
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
		return r.completeChild(ctx, s, p.Slots["0"])
	}
	res, failed, first, err := r.itemsResult(ctx, p)
	if err != nil {
		return outcome{}, err
	}
	s.items = [3]int{len(p.Slots), p.Items, failed}
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

// completeChild completes an action's one child step from its item's
// slot sl: the child's result, or its failure.
func (r *graphRun) completeChild(ctx context.Context, s *stepRun, sl slot) (outcome, error) {
	if sl.Status != "ok" {
		return r.complete(ctx, s, nil, &graph.StepError{Code: sl.Code, Message: sl.Message, ThreadID: sl.ThreadID})
	}
	res, err := r.items.result(ctx, "0", sl)
	if err != nil {
		return outcome{}, err
	}
	return r.complete(ctx, s, res, nil)
}

// itemsResult is the result of a foreach or a wait from its settled
// items (results in item order, errors), how many failed, and the first
// that did.
func (r *graphRun) itemsResult(ctx context.Context, p *pendingStep) (map[string]any, int, *slot, error) {
	results := make([]any, p.Items)
	var errs []map[string]any
	failed, first := 0, (*slot)(nil)
	for i := 0; i < p.Items; i++ {
		sl, ok := p.Slots[strconv.Itoa(i)]
		if !ok {
			continue
		}
		if sl.Status == "ok" {
			res, err := r.items.result(ctx, strconv.Itoa(i), sl)
			if err != nil {
				return nil, 0, nil, err
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
	res := foreachResult(results, errs, failed)
	res["succeeded"] = len(p.Slots) - failed
	return res, failed, first, nil
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
	r.cp.Pending = p
	r.items.clear()
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
	d, ok, err := r.approvalDecision(ctx, p.Approval)
	if err != nil {
		return outcome{}, err
	}
	if !ok {
		return r.awaitApproval(ctx, p, first)
	}
	return r.approvalDecided(ctx, s, p.Approval, d)
}

// approvalDecision is the decision of pending call pa: a person's, of
// this request, or its on_timeout once its deadline has passed; false
// while it has none.
func (r *graphRun) approvalDecision(ctx context.Context, pa *registry.PendingApproval) (registry.Decision, bool, error) {
	decisions, err := r.acts.Decisions(ctx, r.id())
	if err != nil {
		return registry.Decision{}, false, err
	}
	d, ok := decisionOn(decisions, *pa)
	now := r.o.Now()
	if !ok && !pa.Deadline.IsZero() && !now.Before(pa.Deadline) {
		d, ok = registry.Decision{Decision: pa.OnTimeout, By: "timeout", Reason: "no decision within the approval's timeout", At: now.UTC()}, true
	}
	return d, ok, nil
}

// awaitApproval suspends the run until the approval of step p is
// decided, or its deadline (a timeout activation wakes it then); the
// first time, the wait is made durable first. A decision that came
// meanwhile wakes it at once.
func (r *graphRun) awaitApproval(ctx context.Context, p *pendingStep, first bool) (outcome, error) {
	pa := p.Approval
	if first {
		r.emit(transcript.TypeGraphWaiting, transcript.GraphWaiting{WaitingFor: registry.WaitingForApproval, CallID: pa.CallID, Step: p.Step, Node: p.Node})
		if err := r.checkpoint(ctx); err != nil {
			return outcome{}, err
		}
	}
	waiting, err := r.approvalWait().suspend(ctx, &r.version, []registry.PendingApproval{*pa}, pa.Deadline)
	if err != nil {
		return outcome{}, err
	}
	if !waiting {
		return outcome{kind: suspend}, nil
	}
	r.log.Info("graph run waiting for approval", "step", p.Step, "node", p.Node)
	return outcome{kind: suspend, reason: registry.WaitingForApproval}, nil
}

// approvalDecided completes the step of pending call pa, decided d: an
// approval node's result, or a gated tool's call run (approved) or
// failed (denied).
func (r *graphRun) approvalDecided(ctx context.Context, s *stepRun, pa *registry.PendingApproval, d registry.Decision) (outcome, error) {
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
	res, se, err := r.actions.run(ctx, s, a, s.scope, pa.CallID)
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
