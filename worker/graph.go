package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// A graph run's activation (spec: state graphs) is the second path of an
// activation beside a thread's turn loop, and shares its claim, lease,
// heartbeat, version fence, checkpoint script, transcript writer,
// suspensions and Finalize. A step is to a graph what a turn is to a
// thread:
//
//	claim ─▶ load (bundle, pinned graph, tools) ─▶ restore (transcript held
//	   │        to the registry's mark; the last state_checkpoint; its
//	   │        state snapshot, checked against its address and attestation)
//	   ▼
//	┌─▶ decided? ─▶ finalize        cancel flag? ─▶ graph_cancelled
//	│   pending step? ─▶ resume it (children settled, approval decided)
//	│   limits (max_steps) ─▶ graph_error     hand back after N steps/seconds
//	│   step at the cursor:
//	│     gate / return / tool: act in the activation, complete
//	│     directive / graph: plan child ids ─▶ segment (step_started) ─▶
//	│        start (adopting any already started) ─▶ wait without a slot
//	│     foreach of children: a window of max_concurrency, woken as
//	│        each ends (SuspendAny), items settled durably one by one
//	│     approval / wait: suspend until decided / the children end
//	│     sleep: suspend until its wake time (or the duration limit)
//	│   complete: result ─▶ assign ─▶ route (or the error procedure:
//	│     retry, on_error, continue, fail) ─▶ snapshot ─▶ one segment
//	│     (step_completed, state_checkpoint) ─▶ after_step hooks
//	└───────────────────────────────────────────────────────────┘
//
// Choices where the spec leaves room: a graph's knowledge render is made
// when it is read (graph show), as a thread's is, not at every checkpoint;
// tool items of a foreach run in the activation and settle together with
// the step (a crash re-runs them: tools are at least once); a hook's
// directive or graph action starts an async child whose id is planned
// from (run, event, step, hook), so a re-dispatched hook adopts it.

// graphRun is one activation of a graph run.
type graphRun struct {
	activation
	proj *orchestrator.Project
	g    *graph.Graph
	// actions resolve and run the steps' actions: tools, children.
	actions graphActions
	// hooks run the graph's and the project's hooks of its events.
	hooks graphHooks
	// tracer spans its steps.
	tracer stepTracer

	cp    graphCheckpoint
	state map[string]any
	// items are the pending step's settled items: their results, those
	// not yet durable, the stored objects of results read.
	items stepItems
	// chains are where the pending step's children stand: those the
	// transcript records as started, the threads their chains reached.
	chains childChains
	// checkpointed is when this activation last checkpointed.
	checkpointed time.Time
	// began is when this activation began; steps counts its steps (for
	// the hand-back after segment_steps or segment_seconds).
	began time.Time
	steps int
	// finalDurable: the outcome's segment is written.
	finalDurable bool
	// flagRead: the claimed record's cancel flag was used; later checks
	// read the registry.
	flagRead bool
}

// newGraphRun is the graph run of the activation newActivation makes,
// before it loads.
func newGraphRun(newActivation func() activation) *graphRun {
	r := &graphRun{activation: newActivation()}
	id := r.claim.Record.ThreadID
	r.items = stepItems{store: r.store, run: id, emit: r.emit}
	r.chains = childChains{reg: r.reg, o: r.o, log: r.log, run: id, emit: r.emit}
	return r
}

// A graph run hands its activation back (re-enqueued at once, holding
// nothing) after graphs.yaml's segment_steps or segment_seconds, so a
// long graph never pins a worker nor nears asynq's task timeout; its
// state and results are held to its max_state_bytes and
// max_event_result_bytes (config.Graphs).
const (
	// graphRetryInSlot: a retry backoff up to this long waits in the
	// slot; a longer one hands the run back until then.
	graphRetryInSlot = 2 * time.Second
)

// errGraphHandBack ends an activation that handed its run back to go on
// in a new one (or at its retry time).
var errGraphHandBack = fmt.Errorf("graph run handed back: %w", errRetryLater)

// A graph run is a path (path.go): runActivation loads, restores and
// proceeds it.

// decided: the run has its outcome (load failed it, or it was decided
// before this activation).
func (r *graphRun) decided() bool { return r.cp.Final != nil }

// proceed begins a fresh run, then walks it.
func (r *graphRun) proceed(ctx context.Context, fresh bool) error {
	r.began = time.Now()
	if fresh {
		if err := r.begin(ctx); err != nil {
			return err
		}
	}
	return r.walk(ctx)
}

// unverifiable ends a run whose stored state, result or transcript does
// not verify: resume_state_invalid.
func (r *graphRun) unverifiable(ctx context.Context, err error) error {
	return r.failRun(ctx, "resume_state_invalid", err.Error())
}

// handsBack: a run handed back after its segment's steps or seconds goes
// on in the activation already enqueued, which finds the stop.
func (r *graphRun) handsBack(err error) bool { return errors.Is(err, errGraphHandBack) }

// close waits for the activation's side writes.
func (r *graphRun) close() { r.side.Wait() }

// end is how the run's activation ended.
func (r *graphRun) end() pathEnd {
	return pathEnd{released: r.leaseReleased, final: r.cp.Final, version: r.version, spend: r.rec.Cost.Spend}
}

// pastDuration reports whether the claimed run is past its duration.
func (r *graphRun) pastDuration() bool {
	end, ok := durationEnd(r.claim.Record)
	return ok && !r.o.Now().Before(end)
}

// load reads the bundle, the pinned graph and the tools.
func (r *graphRun) load(ctx context.Context) error {
	rec := r.claim.Record
	r.rec, r.version = rec, r.claim.Version
	r.log = r.log.With("graph", rec.Directive)
	var err error
	if r.proj, err = r.o.Project(ctx, rec.Bundle); err != nil {
		if errors.Is(err, directive.ErrBadBundle) || errors.Is(err, blobstore.ErrNotFound) {
			return r.failNow(ctx, "bundle_error", err.Error())
		}
		return err
	}
	r.actions = graphActions{o: r.o, proj: r.proj, rec: rec, emit: r.emit}
	if r.g, err = r.proj.Graph(rec.Directive); err != nil {
		return r.failNow(ctx, "graph_invalid", err.Error())
	}
	r.tracer = stepTracer{tracer: r.o.Tracer(), metrics: r.w.metrics, run: rec.ThreadID, graph: r.g}
	r.hooks = graphHooks{g: r.g, proj: r.proj, rec: rec, actions: &r.actions, emit: r.emit, log: r.log, cp: &r.cp, state: &r.state}
	if d := r.g.Digest(); rec.GraphDigest != "" && d != rec.GraphDigest {
		return r.failNow(ctx, "graph_invalid", fmt.Sprintf("graph %s in the bundle has digest %s, the run pinned %s", rec.Directive, d, rec.GraphDigest))
	}
	if rec.Activation > maxActivations {
		return r.failNow(ctx, "activation_failed", fmt.Sprintf("the run was activated %d times without finishing; giving up", rec.Activation))
	}
	if r.actions.tools, err = r.buildTools(ctx, r.proj); err != nil {
		var pe *permanentError
		if errors.As(err, &pe) {
			return r.failNow(ctx, pe.code, pe.msg)
		}
		return err
	}
	r.actions.env = &tools.Env{ThreadID: rec.ThreadID, ParentID: rec.ParentID, TreeID: rec.WorkspaceID(), Store: r.store,
		Env: map[string]string{"RYE_PARENT_THREAD_ID": rec.ThreadID}, Logger: r.log}
	return nil
}

// failNow ends a run that cannot run at all, at the claimed version.
func (r *graphRun) failNow(ctx context.Context, code, msg string) error {
	if r.tw == nil {
		tw, err := transcript.OpenWriter(ctx, r.store, r.rec.ThreadID, r.signer, r.keyring, orchestrator.RegistryMark(r.rec))
		if err != nil {
			return err
		}
		r.tw = tw
		if last := tw.LastState(); last != nil {
			_ = json.Unmarshal(last.Extra["graph"], &r.cp)
		}
	}
	if r.state == nil {
		r.state = map[string]any{}
	}
	r.decideError(code, msg, "", 0, "")
	return r.finalize(ctx)
}

// failRun ends a run whose state cannot be restored: with a final
// segment when its transcript opened, else in the registry only.
func (r *graphRun) failRun(ctx context.Context, code, msg string) error {
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	r.log.Error("graph run cannot continue", "code", code, "error", msg)
	if r.tw != nil {
		if r.state == nil {
			r.state = map[string]any{}
		}
		r.cp.Pending = nil
		r.decideError(code, msg, "", r.cp.Step, "")
		return r.finalize(ctx)
	}
	out := orchestrator.Outcome{Status: thread.StatusError, Error: &registry.ErrorInfo{Code: code, Message: msg}, Cost: r.rec.Cost, Lease: r.claim.Token}
	if err := r.o.Finalize(ctx, r.rec, r.version, out); err != nil {
		return err
	}
	r.released()
	return nil
}

// restore opens the transcript and loads the last checkpoint's state:
// fresh=true when the run has none yet.
func (r *graphRun) restore(ctx context.Context) (bool, error) {
	var err error
	if mark := orchestrator.RegistryMark(r.rec); r.rec.Activation == 1 && mark.Segments == 0 {
		r.tw, err = transcript.CreateWriter(r.id(), r.store, r.signer)
	} else {
		r.tw, err = transcript.OpenWriter(ctx, r.store, r.id(), r.signer, r.keyring, mark)
	}
	if err != nil {
		return false, fmt.Errorf("open transcript of %s: %w", r.id(), err)
	}
	if r.ctl != nil {
		r.ctl.ready(func() {})
	}
	last := r.tw.LastState()
	if last == nil {
		return true, nil
	}
	raw, ok := last.Extra["graph"]
	if !ok {
		return false, fmt.Errorf("%w: the last checkpoint of %s holds no graph state", errStateInvalid, r.id())
	}
	if err := json.Unmarshal(raw, &r.cp); err != nil {
		return false, fmt.Errorf("%w: checkpoint of %s: %w", errStateInvalid, r.id(), err)
	}
	r.finalDurable = r.cp.Final != nil
	snap, err := loadSnapshot(ctx, r.store, r.id(), r.cp.StateSHA, r.tw.Resumed())
	if err != nil {
		return false, err
	}
	r.state = snap.State
	if p := r.cp.Pending; p != nil {
		if err := p.known(r.id()); err != nil {
			return false, err
		}
		var events []transcript.Event
		if tr := r.tw.Resumed(); tr != nil {
			events = tr.Events
		}
		pendingFrom(p, events)
		r.chains.restored(events)
		if len(p.Children) < p.Planned || len(p.Slots) < p.Settled {
			return false, fmt.Errorf("%w: the pending step %d of %s names %d children and %d settled items, its events %d and %d",
				errStateInvalid, p.Step, r.id(), p.Planned, p.Settled, len(p.Children), len(p.Slots))
		}
	}
	return false, nil
}

// begin starts a fresh run: its environment, its state (the inputs, or a
// resumed or forked run's checkpoint), graph_started and its hooks; the
// start is made durable at once.
func (r *graphRun) begin(ctx context.Context) error {
	r.cp = graphCheckpoint{NextNode: r.g.Start}
	r.state = r.g.InitialState(r.rec.Inputs)
	ev := transcript.GraphStarted{Graph: r.g.Name, GraphDigest: r.rec.GraphDigest, Bundle: r.rec.Bundle, StartNode: r.g.Start,
		Capabilities: r.rec.Capabilities, Tenant: r.rec.TenantOrDefault(), Priority: r.rec.PriorityOrDefault(), Tags: r.rec.Tags}
	ev.Inputs, _ = json.Marshal(r.rec.Inputs)
	ev.Limits, _ = json.Marshal(map[string]any{"limits": r.rec.Limits, "max_steps": r.rec.MaxSteps})
	resumed := false
	if r.rec.PreviousThreadID != "" || r.rec.ForkedFrom != "" {
		if err := r.carry(ctx, &ev); err != nil {
			return err
		}
		resumed = true
	}
	r.emit(transcript.TypeGraphStarted, ev)
	if missing := missingEnv(r.g.EnvRequires); missing != "" {
		r.decideError("missing_environment", fmt.Sprintf("the worker lacks environment variable %s, which the graph requires (env_requires)", missing), "", 0, "")
		return nil
	}
	r.hooks.fire(ctx, graph.EventGraphStarted, map[string]any{"run_id": r.id(), "graph": r.g.Name, "inputs": r.rec.Inputs,
		"state": r.state, "resumed": resumed})
	// capabilities.md, as a thread's: the tools the run may call, attested
	// by its first checkpoint and written once that is durable.
	allowed := func(id string) bool { return thread.Match(r.rec.Capabilities, thread.ToolCapability(id)) }
	caps, err := transcript.RenderCapabilities(r.id(), r.actions.tools.Defs(allowed), r.rec.Capabilities)
	if err != nil {
		r.log.Warn("capabilities.md not rendered", "error", err)
		caps = nil
	} else {
		r.tw.Attest(transcript.ArtifactCapabilities, caps)
	}
	if err := r.checkpoint(ctx); err != nil {
		return err
	}
	if caps != nil {
		key := blobkey.Capabilities(r.id())
		r.side.Go(ctx, r.log, key, func(ctx context.Context) error { return blobstore.PutView(ctx, r.store, key, caps) })
	}
	return nil
}

// missingEnv names the first of names the worker's environment lacks.
func missingEnv(names []string) string {
	for _, n := range names {
		if _, ok := os.LookupEnv(n); !ok {
			return n
		}
	}
	return ""
}

// walk runs steps until the run finishes, waits, is handed back, or the
// activation fails.
func (r *graphRun) walk(ctx context.Context) error {
	for {
		if r.cp.Final != nil {
			return r.finalize(ctx)
		}
		pause, err := r.checkSignals(ctx)
		if err != nil {
			return err
		}
		if pause {
			if paused, err := r.pause(ctx); err != nil || paused {
				return err
			}
		}
		o, err := r.next(ctx)
		if err != nil {
			return err
		}
		switch o.kind {
		case suspend:
			return nil
		case handBack:
			return errGraphHandBack
		}
	}
}

// checkSignals reads what may end the run between steps: a stop the
// activation was asked for, its duration, the cancel flag (a *stopError,
// which the activation decides in one place: stopped), and a shutdown
// (errDraining, the run handed back). It first runs the after_step hooks
// of a step a dead worker may not have run them for (at least once).
// pause says a person asked the run to pause (`spool thread pause`).
func (r *graphRun) checkSignals(ctx context.Context) (pause bool, err error) {
	if stopRequested(ctx) || r.pastDuration() {
		return false, &stopError{}
	}
	sig, err := r.signals(ctx)
	if err != nil {
		return false, err
	}
	if sig.Cancel {
		return false, &stopError{}
	}
	if r.cp.HooksDue > 0 {
		// The last step's after_step hooks may not have run (the
		// worker died after its checkpoint): at least once.
		r.afterStep(ctx, r.cp.HooksDue, "", nil, "")
	}
	if r.w.isDraining() {
		return false, errDraining
	}
	if r.w.yieldDue(ctx, r.grant) {
		yielded(ctx)
		return false, errYield // its tenant's fair share: it waits for admission again
	}
	return sig.Pause, nil
}

// pause pauses the run between steps, at its last checkpoint (a step
// pending resumes when it goes on), when a person asked for it; false
// when an unpause came first.
func (r *graphRun) pause(ctx context.Context) (bool, error) {
	seq, err := r.acts.PauseSelf(ctx, r.id(), r.version)
	if err != nil || seq == 0 {
		return false, err
	}
	r.version = seq
	r.log.Info("graph run paused", "step", r.cp.Step, "node", r.cp.NextNode)
	return true, nil
}

// next runs the run's next step, traced: the step pending resumed, or
// the step at the cursor once checkBeforeStep lets it proceed. A cursor
// at no node is an implicit return: the run completes.
func (r *graphRun) next(ctx context.Context) (outcome, error) {
	if r.cp.Pending == nil && r.cp.NextNode == "" {
		r.decideCompleted(map[string]any{})
		return outcome{}, nil
	}
	if r.cp.Pending == nil {
		if o, err := r.checkBeforeStep(ctx); err != nil || o.kind != proceed {
			return o, err
		}
	}
	sctx, st := r.tracer.start(ctx, &r.cp)
	o, err := r.stepOn(sctx)
	r.tracer.end(st, stepStatus(&r.cp, r.state, st, o, err), err)
	return o, err
}

// signals reads the run's cancel and pause flags: the claimed record's
// first, the registry's after.
func (r *graphRun) signals(ctx context.Context) (registry.Signals, error) {
	if !r.flagRead {
		r.flagRead = true
		return registry.Signals{Cancel: r.rec.CancelRequested, Pause: r.rec.PauseRequested}, nil
	}
	return r.reg.TurnSignals(ctx, r.id())
}

// checkBeforeStep checks the step limit, hands the activation back when
// it has run long enough, and waits out a retry's backoff.
func (r *graphRun) checkBeforeStep(ctx context.Context) (outcome, error) {
	if r.cp.Step >= r.rec.MaxSteps {
		le := &thread.LimitError{Code: codeMaxSteps, Current: float64(r.cp.Step), Max: float64(r.rec.MaxSteps),
			Message: fmt.Sprintf("the run took its %d steps (max_steps) before reaching a return node; raise limits.max_steps in the graph or --limit max_steps=N", r.rec.MaxSteps)}
		r.emit(transcript.TypeLimitExceeded, transcript.LimitExceeded{Code: le.Code, Current: le.Current, Max: le.Max})
		r.hooks.fire(ctx, graph.EventLimit, map[string]any{"run_id": r.id(), "limit_code": le.Code, "current_value": le.Current,
			"current_max": le.Max, "state": r.state})
		r.decideError(le.Code, le.Message, r.cp.NextNode, r.cp.Step, "")
		return finished, nil
	}
	if cfg := r.proj.Graphs; r.steps >= cfg.SegmentSteps || time.Since(r.began) >= cfg.SegmentTime() {
		return r.handBackAt(ctx, r.o.Now(), "handback")
	}
	if at := r.cp.RetryAt; !at.IsZero() {
		wait := at.Sub(r.o.Now())
		if wait > graphRetryInSlot {
			return r.handBackAt(ctx, at, registry.WaitingForRetry)
		}
		if wait > 0 {
			select {
			case <-ctx.Done():
				return outcome{}, context.Cause(ctx)
			case <-time.After(wait):
			}
		}
		r.cp.RetryAt = time.Time{}
	}
	return goOn, nil
}

// handBackAt suspends the run until at (now: at once) and schedules the
// activation that continues it; this one ends holding no slot.
func (r *graphRun) handBackAt(ctx context.Context, at time.Time, reason string) (outcome, error) {
	seq, err := r.acts.SuspendUntil(ctx, r.id(), r.version, reason, at)
	if err != nil {
		return outcome{}, err
	}
	r.version = seq
	fault("graph:" + reason + "_suspended")
	var opts []asynq.Option
	if at.After(r.o.Now()) {
		opts = append(opts, asynqProcessAt(at))
	}
	if err := r.enq.Enqueue(ctx, queue.Activation{ThreadID: r.id(), Reason: "timeout"}, seq, r.rec.Queue, opts...); err != nil {
		return outcome{}, err
	}
	r.log.Info("graph run handed back", "reason", reason, "at", at, "steps", r.steps)
	return outcome{kind: handBack, reason: reason, at: at}, nil
}

// emit appends an event to the transcript (made durable at the next
// checkpoint).
func (r *graphRun) emit(typ string, payload any) {
	if _, err := r.tw.Append(typ, payload); err != nil {
		r.log.Warn("transcript append", "event_type", typ, "error", err)
	}
}

// decideCompleted, decideError and decideCancelled record the run's
// outcome (with its event); finalize applies it.
func (r *graphRun) decideCompleted(outputs map[string]any) {
	res, _ := json.Marshal(outputs)
	r.cp.Final = &final{Status: thread.StatusCompleted, Result: string(res), Outputs: outputs}
}

func (r *graphRun) decideError(code, msg, node string, step int, cause string) {
	r.emit(transcript.TypeGraphError, transcript.GraphErrorEvent{Code: code, Message: msg, Node: node, Step: step, Cause: cause})
	r.cp.Final = &final{Status: thread.StatusError, Error: &registry.ErrorInfo{Code: code, Message: msg}}
}

func (r *graphRun) decideCancelled(ctx context.Context, reason string) {
	var children []string
	node := r.cp.NextNode
	if p := r.cp.Pending; p != nil {
		node = p.Node
		for _, id := range p.Children {
			if _, settled := p.Slots[itemOf(p, id)]; !settled {
				children = append(children, id)
			}
		}
		// The cancel's cascade reached them already; one that started
		// after it is cancelled here.
		for _, id := range children {
			if _, err := r.o.Cancel(context.WithoutCancel(ctx), id, true); err != nil {
				r.log.Warn("child not cancelled", "child_id", id, "error", err)
			}
		}
	}
	r.emit(transcript.TypeGraphCancelled, transcript.GraphCancelled{Step: r.cp.Step, Node: node, RequestedBy: "user",
		CancelledChildren: children, Reason: reason})
	r.cp.Final = &final{Status: thread.StatusCancelled, Error: &registry.ErrorInfo{Code: "cancelled", Message: reason}}
}

// itemOf is the item index of child id in p ("" when it is none of them).
func itemOf(p *pendingStep, id string) string {
	for k, v := range p.Children {
		if v == id {
			return k
		}
	}
	return ""
}

// decideStop records the outcome of a run whose activation context was
// stopped: cancelled, or the duration limit (its running children are
// cancelled).
func (r *graphRun) decideStop(ctx context.Context) {
	if errors.Is(context.Cause(ctx), errDurationExceeded) || (!stopRequested(ctx) && r.pastDuration()) {
		if p := r.cp.Pending; p != nil {
			for _, id := range p.Children {
				if _, err := r.o.Cancel(context.WithoutCancel(ctx), id, true); err != nil {
					r.log.Warn("child not cancelled", "child_id", id, "error", err)
				}
			}
		}
		elapsed := r.cost().ElapsedSeconds
		msg := fmt.Sprintf("the run reached its duration limit of %gs (%s)", r.rec.Limits.Duration, thread.RaiseHint(thread.CodeDurationExceeded))
		r.emit(transcript.TypeLimitExceeded, transcript.LimitExceeded{Code: thread.CodeDurationExceeded, Current: elapsed, Max: r.rec.Limits.Duration})
		r.hooks.fire(context.WithoutCancel(ctx), graph.EventLimit, map[string]any{"run_id": r.id(), "limit_code": thread.CodeDurationExceeded,
			"current_value": elapsed, "current_max": r.rec.Limits.Duration, "state": r.state})
		r.decideError(thread.CodeDurationExceeded, msg, r.cp.NextNode, r.cp.Step, "")
		return
	}
	r.decideCancelled(ctx, "cancelled by request")
}

// stopped is the one place that decides a run's stop: a stop found
// between steps (a *stopError: a cancel request, the cancel flag, the
// duration limit), or one that interrupted the activation where nothing
// decides on it (a checkpoint, a wait), ends the run now, on a detached
// context: cancelled, or duration_exceeded (decideStop). An outcome
// decided before the stop stands.
func (r *graphRun) stopped(ctx context.Context, cause error) error {
	stopped := ctx
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	r.log.Info("graph run stopped; ending it", "cause", context.Cause(stopped), "error", cause)
	if r.cp.Final == nil {
		r.decideStop(stopped)
	}
	return r.finalize(ctx)
}

// finalize ends the run with its decided outcome: a final segment (the
// outcome's event, the last state), then Finalize (registry, ledger,
// thread.json, waiters), then the graph_completed hooks.
func (r *graphRun) finalize(ctx context.Context) error {
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	f := r.cp.Final
	cost := r.cost()
	spend, err := r.o.SubtreeSpend(ctx, r.rec)
	if err != nil {
		r.log.Warn("subtree spend not read", "error", err)
	} else {
		cost.Spend = spend
	}
	if !r.finalDurable {
		if f.Status == thread.StatusCompleted {
			r.emit(transcript.TypeGraphCompleted, transcript.GraphCompleted{Status: string(f.Status), Steps: r.cp.Step, Outputs: f.Outputs,
				SuppressedErrors: r.cp.SuppressedErrors, ElapsedMS: int64(cost.ElapsedSeconds * 1000), Spend: cost.Spend})
		}
		// The graph_completed hooks run before the final segment, which
		// records them (hook_fired): a worker that finalizes again after
		// a crash before it runs them again, at least once.
		evctx := map[string]any{"run_id": r.id(), "graph": r.rec.Directive, "status": string(f.Status), "steps": r.cp.Step,
			"outputs": f.Outputs, "state": r.state, "suppressed_errors": r.cp.SuppressedErrors}
		if f.Error != nil {
			evctx["error"] = map[string]any{"code": f.Error.Code, "message": f.Error.Message}
		}
		r.hooks.fire(ctx, graph.EventGraphCompleted, evctx)
		r.cp.Pending, r.cp.HooksDue = nil, 0
		if err := r.checkpoint(ctx); err != nil {
			return err
		}
		r.finalDurable = true
	}
	out := orchestratorOutcome(f, cost)
	out.Transcript = new(r.tw.Mark())
	out.Lease = r.claim.Token
	r.side.Wait()
	if err := r.o.Finalize(ctx, r.rec, r.version, out); err != nil {
		return err
	}
	r.released()
	r.w.metrics.finished(r.rec.Directive, string(f.Status))
	r.log.Info("graph run finished", "status", f.Status, "steps", r.cp.Step)
	return nil
}

// released records that Finalize released the lease: nothing renews it.
func (r *graphRun) released() {
	r.leaseReleased = true
	if r.stopLease != nil {
		r.stopLease()
	}
}
