package worker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// outcomeKind is where a step of the turn loop leads.
type outcomeKind int

const (
	// proceed: the next step (after the last one, the next turn).
	proceed outcomeKind = iota
	// finish: the thread's outcome is decided (session.st.Final):
	// finalize it.
	finish
	// suspend: the thread waits (outcome.reason: on children, ...); its
	// state is checkpointed and the activation ends holding no slot. An
	// event (a child's end, a timeout) enqueues the next activation.
	suspend
	// handBack: the thread is checkpointed and the activation ends
	// holding no slot; the thread continues at outcome.at (a retry wait)
	// or at once on another worker (a drain).
	handBack
	// handOff: the context is full: the thread hands off to a
	// continuation.
	handOff
)

// outcome is what a step of the turn loop leads to.
type outcome struct {
	kind outcomeKind
	// reason of a suspension or hand-back: "children", "retry_wait",
	// "drain".
	reason string
	// at is when a handed-back thread continues; zero: at once.
	at time.Time
}

var (
	goOn     = outcome{kind: proceed}
	finished = outcome{kind: finish}
)

// step is one step of a turn. where names, for a stop that lands during
// it, what the stop interrupted ("during the model call"); "" when nothing
// was in flight.
type step struct {
	where string
	run   func(context.Context) (outcome, error)
}

// loop runs turns until the thread finishes, suspends, is handed back,
// hands off, or the activation fails:
//
//	┌─▶ drain? ──▶ check (cancel flag, limits, budget) ──▶ fits the
//	│     context window? ──▶ model call
//	│     ──▶ record the response ──▶ tool calls ──▶ checkpoint
//	│     ──▶ after_step hooks ──▶ wait on children? ──▶ context full?
//	└───────────────────────────────────────────────────────────┘
//
// Each step returns an outcome; the first that is not proceed ends the
// turn, and loop acts on it in one place. Whether the activation's context
// was stopped (a cancel request, the duration limit) is decided after each
// step, also in one place (stopAfter), from the context's cause.
func (s *session) loop(ctx context.Context) error {
	for {
		o, err := s.turn(ctx)
		if err != nil {
			return err
		}
		switch o.kind {
		case proceed:
			continue
		case finish:
			return s.finalize(ctx)
		case handOff:
			return s.handoff(ctx)
		case suspend:
			return nil
		case handBack:
			switch o.reason {
			case "drain":
				return errDraining
			case reasonYield:
				return errYield
			}
			return errRetryLater
		}
	}
}

// turn runs the steps of one turn.
func (s *session) turn(ctx context.Context) (o outcome, err error) {
	ctx, span := s.tracer.startTurn(ctx, s.st.Turn+1)
	defer func() { endTurn(span, o, err) }()
	var resp *provider.Response
	steps := []step{
		{"", s.stepDrain},
		{"", s.checkBeforeTurn},
		{"", s.stepFits},
		{"during the model call", func(ctx context.Context) (outcome, error) {
			var o outcome
			var err error
			resp, o, err = s.stepModel(ctx)
			return o, err
		}},
		{"during the tool calls", func(ctx context.Context) (outcome, error) { return s.dispatchCalls(ctx, resp.ToolCalls) }},
		{"", s.stepCheckpoint},
		{"", s.stepAfterStep},
		{"", s.stepWait},
		{"", s.stepContext},
	}
	s.interrupted = ""
	// The turn's own context: an interrupt cancels it (errInterrupted),
	// stopping the call or tool in flight, and the thread goes on.
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if s.ctl != nil {
		s.ctl.setTurn(cancel)
		defer s.ctl.setTurn(nil)
	}
	for _, st := range steps {
		o, err := st.run(tctx)
		if stop := s.stopAfter(tctx, st.where); stop != nil {
			return outcome{}, stop
		}
		if errors.Is(context.Cause(tctx), errInterrupted) && ctx.Err() == nil {
			return s.afterInterrupt(ctx, st.where)
		}
		if err != nil {
			return outcome{}, err
		}
		if o.kind != proceed {
			return o, nil
		}
	}
	return goOn, nil
}

// stopAfter says, after each step, whether a cancel request or the
// duration limit stopped the activation's context during it (the step's
// call that saw it failed, or finished anyway): a *stopError naming what
// the stop interrupted (a tool the stop cut short names itself:
// session.interrupted), which ends the turn; the activation then decides
// the stop in one place (session.stopped). A handoff already decided
// goes on.
func (s *session) stopAfter(ctx context.Context, where string) error {
	if !stopRequested(ctx) || s.st.Handoff != "" {
		return nil
	}
	if s.interrupted != "" {
		where = "during tool " + s.interrupted
	}
	return &stopError{where: where}
}

// stepDrain hands the thread back, between turns, when the worker shuts
// down: its last checkpoint is durable, another worker continues it. It
// also yields the activation's slot when admission says so (yieldDue):
// the thread then waits for admission again.
func (s *session) stepDrain(ctx context.Context) (outcome, error) {
	if s.w.isDraining() {
		return outcome{kind: handBack, reason: "drain"}, nil
	}
	if s.w.yieldDue(ctx, s.grant) {
		yielded(ctx)
		return outcome{kind: handBack, reason: reasonYield}, nil
	}
	if !s.w.allowanceLeft(ctx, s.grant, s.st.Cost.Spend, s.nextCallEstimate(), s.st.Turn+1) {
		return s.tenantBudgetSpent(ctx)
	}
	return goOn, nil
}

// nextCallEstimate is what the thread's next model call may cost, for
// its spend allowance: its prompt as the rate limiter estimates it and
// max_tokens of output at the model's prices, or the last turn's cost
// when that is more (or the call cannot be priced).
func (s *session) nextCallEstimate() float64 {
	if s.grant == nil || s.grant.allowance < 0 {
		return 0
	}
	in, _ := provider.ContextUsage(s.st.LastPromptTokens, s.msgs.since(s.st.SinceResponse), 0)
	est, err := s.prov.Cost(s.rec.Model, provider.Usage{InputTokens: in, OutputTokens: s.w.cfg.MaxOutputTokens})
	if err != nil {
		return s.st.TurnSpend
	}
	return max(est, s.st.TurnSpend)
}

// tenantBudgetSpent stops a thread whose tenant's spend window has no
// room left for its next model call (9.2 step 3), after its last turn's
// checkpoint: under on_exhausted: wait it hands back and waits for
// admission again (tenant_budget, until a window has room); under
// refuse it ends error tenant_budget_exhausted.
func (s *session) tenantBudgetSpent(ctx context.Context) (outcome, error) {
	if !s.w.refusesOnExhausted(ctx, s.grant.tenant) {
		s.log.Info("tenant's spend window is spent: the thread waits for admission (tenant_budget)")
		return outcome{kind: handBack, reason: reasonYield}, nil
	}
	return s.limitReached(ctx, &thread.LimitError{Code: admission.CodeTenantBudgetExhausted,
		Message: fmt.Sprintf("tenant %s has no room left in its spend window (on_exhausted: refuse)", s.grant.tenant)}), nil
}

// reasonYield is the hand-back of an activation that yields its slot.
const reasonYield = "yield"

// stepModel calls the model and records its response.
func (s *session) stepModel(ctx context.Context) (*provider.Response, outcome, error) {
	resp, err := s.callModel(ctx)
	if errors.Is(err, errRetryLater) {
		return nil, outcome{kind: handBack, reason: "retry_wait", at: s.st.RetryAt}, nil
	}
	if errors.Is(err, errRateLimited) {
		return nil, outcome{kind: handBack, reason: registry.WaitingForRateLimit, at: s.st.RetryAt}, nil
	}
	if err != nil {
		return nil, outcome{}, err
	}
	if resp == nil { // the call's error hooks decided the thread's end
		return nil, finished, nil
	}
	o, err := s.recordResponse(ctx, resp)
	// Its cost is known: the allowance covers it before any charge.
	s.w.coverSpend(ctx, s.grant, s.st.Cost.Spend, s.st.Turn)
	return resp, o, err
}

// stepCheckpoint makes the turn durable: its segment, the registry's
// version and the turn's charge.
func (s *session) stepCheckpoint(ctx context.Context) (outcome, error) {
	if len(s.st.Pending) > 0 {
		// Recorded with the turn: the suspension itself writes no
		// segment, and the children may be done before it happens.
		s.emit(transcript.TypeThreadWaiting, transcript.ThreadWaiting{ChildIDs: pendingThreads(s.st.Pending)})
	}
	return goOn, s.checkpoint(ctx)
}

// stepAfterStep runs the after_step hooks.
func (s *session) stepAfterStep(ctx context.Context) (outcome, error) {
	s.runHooks(ctx, hooks.EventAfterStep, map[string]any{"thread_id": s.id(), "cost": toMap(s.st.Cost), "turn": s.st.Turn})
	return goOn, nil
}

// stepWait suspends the thread while the turn's pending calls (spawns,
// wait_threads) wait on threads, or answers them when they are done.
func (s *session) stepWait(ctx context.Context) (outcome, error) {
	if len(s.st.Approvals) > 0 {
		done, err := s.resolveApprovals(ctx)
		if err != nil {
			return goOn, err
		}
		if !done {
			return outcome{kind: suspend, reason: registry.WaitingForApproval}, nil
		}
		if err := s.checkpoint(ctx); err != nil {
			return goOn, err
		}
	}
	if len(s.st.Pending) == 0 {
		return goOn, nil
	}
	done, err := s.resolvePending(ctx)
	if err != nil || done {
		return goOn, err
	}
	return outcome{kind: suspend, reason: "children"}, nil
}

// stepContext hands off when the context window is full.
func (s *session) stepContext(context.Context) (outcome, error) {
	if s.contextFull() {
		return outcome{kind: handOff}, nil
	}
	return goOn, nil
}

// checkBeforeTurn checks cancellation and limits (spec runner steps 1-2).
// A stop request that reached the activation's context is decided by the
// turn (stopAfter), not here.
func (s *session) checkBeforeTurn(ctx context.Context) (outcome, error) {
	// The first check of an activation reads the flag in the claimed
	// record: the worker listened for the thread's cancel events before it
	// claimed, so a later request has reached ctx. Later turns read the
	// flag again, in case an event was lost.
	sig := registry.Signals{Cancel: s.rec.CancelRequested, Pause: s.rec.PauseRequested}
	queued := s.st.inboxNewer(s.rec)
	if s.flagRead {
		var err error
		if sig, err = s.reg.TurnSignals(ctx, s.id()); err != nil {
			return outcome{}, err
		}
		queued = sig.Queued > 0
	}
	s.flagRead = true
	if sig.Cancel {
		return outcome{}, &stopError{}
	}
	if sig.Pause {
		if o, err := s.pause(ctx); err != nil || o.kind != proceed {
			return o, err
		}
	}
	if queued {
		if err := s.deliverInbox(ctx); err != nil {
			return outcome{}, err
		}
	}
	s.st.Cost.ElapsedSeconds = elapsed(s.rec, s.o.Now())
	err := s.st.Cost.CheckLimits(s.rec.Limits)
	if err == nil && s.spend.stop != nil {
		err = s.spend.stop
	}
	if err == nil {
		return goOn, nil
	}
	var le *thread.LimitError
	if !errors.As(err, &le) {
		return outcome{}, err
	}
	return s.limitReached(ctx, le), nil
}

// pause pauses the thread before a turn, when a person asked for it
// (`spool thread pause`): its last checkpoint is where it goes on when
// unpaused; the activation ends holding no slot. Messages queued for it
// are delivered when it goes on. An unpause that came first lets it go
// on now.
func (s *session) pause(ctx context.Context) (outcome, error) {
	seq, err := s.acts.PauseSelf(ctx, s.id(), s.version)
	if err != nil || seq == 0 {
		return goOn, err
	}
	s.version = seq
	s.log.Info("thread paused")
	return outcome{kind: suspend, reason: reasonPaused}, nil
}

// reasonPaused is the suspension of a thread paused by a person.
const reasonPaused = "paused"

// limitReached ends the thread at a limit it reached: the limit event and
// its hooks, then the end a hook decided (continue: completed with what it
// has, limits do not grow) or the limit's error.
func (s *session) limitReached(ctx context.Context, le *thread.LimitError) outcome {
	s.emit(transcript.TypeLimitExceeded, transcript.LimitExceeded{Code: le.Code, Current: le.Current, Max: le.Max})
	evctx := hooks.LimitContext(s.id(), le)
	s.runHooks(ctx, hooks.EventLimit, evctx)
	dec := s.dispatcher.Decide(hooks.EventLimit, evctx)
	if dec.Action == hooks.Continue {
		// A hook handled the limit; limits do not grow, so the thread
		// still cannot take another turn: it completes with what it has.
		s.st.decide(thread.StatusCompleted, s.msgs.lastAssistantText(), nil, nil)
		return finished
	}
	s.st.decide(thread.StatusError, "", nil, &registry.ErrorInfo{Code: le.Code, Message: le.Error()})
	return finished
}

// elapsed is how long the thread of rec has run at now, in seconds (the
// time it was paused not counted).
func elapsed(rec *registry.Record, now time.Time) float64 {
	if rec.StartedAt.IsZero() {
		return 0
	}
	return now.Sub(runStart(rec)).Seconds()
}

// afterInterrupt ends a turn that an interrupt cut short, where names
// what it stopped. A model call cut short left no response: nothing of it
// is recorded or charged (its usage is unknown; the provider may bill
// it). Tool calls of the turn left unanswered are answered as not run, so
// the conversation stays valid; the turn's state is checkpointed, and the
// next turn delivers the message.
func (s *session) afterInterrupt(ctx context.Context, where string) (outcome, error) {
	s.log.Info("turn interrupted", "where", where)
	for _, c := range s.msgs.unanswered() {
		if !s.st.awaitsApproval(c.ID) {
			s.toolResult(c.ID, normalizeTool(c.Name), "not run: a person interrupted the turn", true, "")
		}
	}
	return goOn, s.checkpoint(ctx)
}

// awaitsApproval reports whether call id waits for a person's decision.
func (st *state) awaitsApproval(id string) bool {
	for _, a := range st.Approvals {
		if a.CallID == id {
			return true
		}
	}
	return false
}

// inboxNewer reports whether the claimed record rec says messages were
// queued that the conversation does not hold (its inbox_seq is past
// InboxSeq).
func (st *state) inboxNewer(rec *registry.Record) bool {
	n, _ := strconv.ParseInt(rec.Extra["inbox_seq"], 10, 64)
	return n > st.InboxSeq
}

// deliverInbox appends the messages people sent (`spool thread send`,
// `interrupt`) that the conversation does not hold yet, as user messages
// the model sees on its next call; the checkpoint that follows makes them
// durable (with InboxSeq, so each is delivered once).
func (s *session) deliverInbox(ctx context.Context) error {
	msgs, err := s.reg.Inbox(ctx, s.id(), s.st.InboxSeq)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		s.msgs = append(s.msgs, thread.Message{Role: thread.RoleUser, Content: m.Content})
		s.st.SinceResponse++
		s.emit(transcript.TypeUserMessage, transcript.UserMessage{Content: m.Content, By: m.By, Interrupted: m.Interrupt})
		s.st.InboxSeq = m.Seq
	}
	return nil
}
