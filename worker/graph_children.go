package worker

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
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

// startChildren starts a step of children of kind (a child step, a
// foreach of them) with items items: it checks the action, then pends
// the step and moves its window on. An async action starts its one child
// and ends the step at once (childStep.startAsync).
func startChildren(ctx context.Context, r *graphRun, s *stepRun, kind string, items int) (stepEnd, error) {
	a, err := r.actions.resolve(s.n.Action, s.scope)
	if err != nil {
		return stepFailed(err), nil
	}
	if !graph.Permitted(r.rec.Capabilities, a) {
		return stepFailed(stepErr(graph.CodePermissionDenied, "starting %s needs capability %s, which this run does not hold", a.ID(), a.Capability())), nil
	}
	if a.Async {
		return childStep{}.startAsync(ctx, r, s, a)
	}
	return openWindow(ctx, r, s, newPending(r, s, kind, items))
}

// newPending is step s pending as kind, with items items, planned none.
func newPending(r *graphRun, s *stepRun, kind string, items int) *pendingStep {
	return &pendingStep{Step: s.step, Node: s.n.Name, Kind: kind, Attempt: s.attempt, StartedAt: r.o.Now().UTC(), Items: items,
		Children: map[string]string{}, Slots: map[string]slot{}}
}

// openWindow makes p, a step of children, the run's pending step and
// moves it on: its first round.
func openWindow(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep) (stepEnd, error) {
	r.cp.Pending = p
	r.items.clear()
	return advanceWindow(ctx, r, p.children(), s, p, true)
}

// advanceWindow moves a step of children of kind k on: it settles the
// children that ended, plans the next items (their ids durable before
// any starts), starts as many as the window allows, and ends the step
// once it is done (k.done). While children run it waits for one to end
// in the activation (childHold), then suspends until one does.
//
// Plans run ahead of starts: up to two windows of max_concurrency items
// are planned (recorded) beyond those running, so a child that ends is
// replaced at once, by an item already recorded, without a segment
// between (k.planLimit). A segment is written when new items are
// planned, and, for the progress people watch, when items settled and
// graphProgressEvery has passed; an item settled after the last segment
// is settled again, from its child's record, by whichever activation
// goes on.
func advanceWindow(ctx context.Context, r *graphRun, k childKind, s *stepRun, p *pendingStep, first bool) (stepEnd, error) {
	items, err := k.items(r, s, p)
	if err != nil {
		return stepFailed(err), nil
	}
	w := &childWindow{r: r, k: k, s: s, p: p, items: items, size: k.window(r, s, p), hold: &childHold{r: r}, first: first}
	defer w.hold.close()
	for round := 0; ; round++ {
		if round > 100000 {
			return stepEnd{}, fmt.Errorf("graph run %s: step %d does not settle", r.id(), p.Step)
		}
		end, done, err := w.round(ctx)
		if err != nil || done {
			return end, err
		}
		w.first = false
	}
}

// childWindow is a step of children as an activation moves it on, what
// its rounds share: its kind, the step, its items (a foreach's), its
// window's size, the hold on its children, and whether the round is the
// step's first.
type childWindow struct {
	r     *graphRun
	k     childKind
	s     *stepRun
	p     *pendingStep
	items []any
	size  int
	hold  *childHold
	first bool
	// stopped: the step stops, and its running children were told to
	// cancel in this activation.
	stopped bool
}

// stop cancels the running children of a step that stops (an item failed
// and on_item_error is fail), once per activation: their spend stops,
// and the step fails once they have settled. A crash before they all
// settled cancels them again from the next activation, at no cost.
func (w *childWindow) stop(ctx context.Context, unstarted []string) error {
	if !w.p.Stopping || w.stopped {
		return nil
	}
	fault("graph:before_stop")
	n, err := cancelChildren(ctx, w.r, w.p.running(unstarted))
	if err != nil {
		return err
	}
	w.stopped = true
	if n > 0 {
		w.r.log.Info("foreach stops at a failed item: running items cancelled", "step", w.p.Step, "node", w.p.Node, "cancelled", n)
	}
	return nil
}

// round is one round of a step of children: settle the children that
// ended (ending the step once it is done), plan and record more, start
// what the window allows, then hold for an end, or suspend. done when
// the round ended the activation's part in the step (the step ended, or
// the run suspended); false to go round again.
func (w *childWindow) round(ctx context.Context) (_ stepEnd, done bool, _ error) {
	r, s, p := w.r, w.s, w.p
	changed, unstarted, err := w.settle(ctx)
	if err != nil {
		return stepEnd{}, true, err
	}
	if w.k.done(s, p, unstarted) {
		if err := r.items.flush(ctx, p); err != nil {
			return stepEnd{}, true, err
		}
		for _, i := range sortedIndexes(p.Children) {
			s.threadIDs = append(s.threadIDs, p.Children[i])
		}
		end, err := w.k.result(ctx, r, s, p)
		return end, true, err
	}
	planned, err := w.plan(ctx, unstarted, changed)
	if err != nil {
		return stepEnd{}, true, err
	}
	running, err := w.start(ctx, slices.Concat(unstarted, planned))
	if err != nil || len(running) == 0 {
		return stepEnd{}, err != nil, err
	}
	if ended, err := w.hold.wait(ctx, running); err != nil || ended {
		return stepEnd{}, err != nil, err
	}
	suspended, err := w.suspend(ctx, running)
	if err != nil || !suspended {
		return stepEnd{}, err != nil, err
	}
	r.w.metrics.suspended()
	r.log.Info("graph run waiting on children", "step", p.Step, "node", p.Node, "running", len(running))
	return stepOpen(outcome{kind: suspend, reason: registry.WaitingForChildren}), true, nil
}

// plan plans more items and records the round (recordPlans, record);
// when the step stops, it cancels the running children (stop).
func (w *childWindow) plan(ctx context.Context, unstarted []string, changed bool) ([]string, error) {
	planned, err := w.planMore(ctx, w.k.planLimit(w.p, w.size))
	if err != nil {
		return nil, err
	}
	if len(planned) > 0 || w.first {
		w.recordPlans(planned)
	}
	if err := w.record(ctx, planned, unstarted, changed); err != nil {
		return nil, err
	}
	return planned, w.stop(ctx, unstarted)
}

// start starts what the window allows of waiting (items planned and not
// registered, in order), and returns the children running after it;
// none when a start was refused, so that the round settles its item
// again at once.
func (w *childWindow) start(ctx context.Context, waiting []string) ([]string, error) {
	p := w.p
	start := p.startable(waiting, w.size)
	refused, err := w.launch(ctx, start)
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
func (w *childWindow) recordPlans(planned []string) {
	s, p := w.s, w.p
	ev := transcript.StepStarted{Step: p.Step, Node: p.Node, Kind: s.n.Kind, Attempt: p.Attempt,
		StartedAt: p.StartedAt.Format(time.RFC3339Nano), Children: map[string]string{}}
	if a := s.n.Action; a != nil {
		ev.Action = &transcript.StepAction{Tool: a.Tool, Directive: a.Directive, Graph: a.Graph}
	}
	for _, i := range planned {
		ev.Children[i] = p.Children[i]
	}
	w.r.emit(transcript.TypeStepStarted, ev)
}

// record makes a round durable when it must be: new plans (before any
// of them starts), the step's first round, settled items once
// graphProgressEvery has passed, or any settled while the step stops.
func (w *childWindow) record(ctx context.Context, planned, unstarted []string, changed bool) error {
	r, p := w.r, w.p
	// Items settled and not yet durable, in this round or one before it
	// (a held run's progress comes due while it waits: childHold).
	settled := r.items.dirty()
	progress := settled && time.Since(r.checkpointed) >= graphProgressEvery
	if len(planned) == 0 && !w.first && !progress && (!changed || !p.Stopping) {
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

// suspend suspends the run on its running children, after making what
// the round recorded (children started or refused, items settled)
// durable: a suspension writes no segment, and the next activation
// begins from the last one. false when it did not suspend (a child ended
// meanwhile, or a chain moved on): the caller settles again.
func (w *childWindow) suspend(ctx context.Context, running []string) (bool, error) {
	r := w.r
	if r.items.dirty() || r.tw.Pending() > 0 {
		if err := r.items.flush(ctx, w.p); err != nil {
			return false, err
		}
		if err := r.checkpoint(ctx); err != nil {
			return false, err
		}
	}
	suspended, err := w.suspendOn(ctx, running)
	if errors.Is(err, registry.ErrChainMoved) {
		return false, nil
	}
	return suspended, err
}

// graphProgressEvery is how often a foreach's settled items are made
// durable while no new item is planned (its progress in the record and
// the transcript).
const graphProgressEvery = time.Second

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
			if ev.ThreadID == r.id() && ev.Status == registry.PauseEvent {
				return false, nil // paused: the run suspends, holding no slot
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

// suspendOn suspends the run on the chains of ids: until any ends when
// the kind wakes on any (a foreach's window, a wait of mode any), else
// until all have.
func (w *childWindow) suspendOn(ctx context.Context, ids []string) (bool, error) {
	r := w.r
	targets, err := r.chains.targets(ctx, ids)
	if err != nil {
		return false, err
	}
	suspend := r.acts.Suspend
	if w.k.wakesOnAny(w.s) {
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
func (w *childWindow) settle(ctx context.Context) (changed bool, unstarted []string, err error) {
	r, s, p := w.r, w.s, w.p
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
		case rec == nil && w.k.plans():
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

// planMore plans items until limit are planned and unsettled (an
// action's one child, or a foreach's items, a window ahead of those
// running), returning their indexes; the ids are recorded in p.Children.
// A step that plans none of its children (a wait) plans nothing.
func (w *childWindow) planMore(ctx context.Context, limit int) ([]string, error) {
	r, s, p := w.r, w.s, w.p
	if !w.k.plans() || p.Stopping {
		return nil, nil
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
		req, err := w.request(i)
		if err != nil {
			var se *graph.StepError
			if errors.As(err, &se) || !isInfra(err) {
				if err := r.items.settle(s, p, k, slot{Status: "error", Code: asStepError(err).Code, Message: err.Error()}, nil); err != nil {
					return nil, err
				}
				p.NextItem = i + 1
				if p.Stopping {
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

// request is the start of item i (a child action: item 0), its action
// resolved in the scope the kind gives it.
func (w *childWindow) request(i int) (orchestrator.StartRequest, error) {
	r, p := w.r, w.p
	scope := w.k.scope(w.s, w.items, i)
	a, err := r.actions.resolve(w.s.n.Action, scope)
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
func (w *childWindow) launch(ctx context.Context, indexes []string) (refused bool, err error) {
	r, s, p := w.r, w.s, w.p
	type started struct {
		k   string
		req orchestrator.StartRequest
		rec *registry.Record
		err error
	}
	out := make([]started, len(indexes))
	for j, k := range indexes {
		i, _ := strconv.Atoi(k)
		req, err := w.request(i)
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

// itemFailed is the failure of a step of items that stops at a failed
// item (kind code), first.
func itemFailed(code string, first *slot) *graph.StepError {
	return &graph.StepError{Code: code, Message: fmt.Sprintf("item failed (%s): %s", first.Code, first.Message), ThreadID: first.ThreadID}
}
