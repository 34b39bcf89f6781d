package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// loop runs turns until the thread finishes, suspends, hands off, or the
// activation must stop.
func (s *session) loop(ctx context.Context) error {
	for {
		if s.w.isDraining() {
			return errDraining
		}
		if stop, err := s.checkBeforeTurn(ctx); stop || err != nil {
			return err
		}
		resp, err := s.callModel(ctx)
		if err != nil {
			return err
		}
		if resp == nil { // the call ended the thread (cancel or failure)
			return s.finalize(ctx)
		}
		if err := s.afterResponse(ctx, resp); err != nil {
			return err
		}
		if s.st.Final == nil && stopRequested(ctx) {
			// The request came while the tools ran, after the last one
			// that looked at ctx: the turn is recorded, no other starts.
			s.decideStop(ctx, "during the tool calls")
		}
		if s.st.Final != nil {
			return s.finalize(ctx)
		}
		if len(s.st.Pending) > 0 {
			// Recorded with the turn: the suspension itself writes no
			// segment, and the children may be done before it happens.
			s.emit(transcript.TypeThreadWaiting, transcript.ThreadWaiting{ChildIDs: pendingThreads(s.st.Pending)})
		}
		if err := s.checkpoint(ctx); err != nil {
			return err
		}
		s.runHooks(ctx, hooks.EventAfterStep, map[string]any{"thread_id": s.id(), "cost": toMap(s.st.Cost), "turn": s.st.Turn})
		if stopRequested(ctx) {
			// Between turns: the thread neither waits nor hands off.
			s.decideStop(ctx, "")
			return s.finalize(ctx)
		}
		if len(s.st.Pending) > 0 {
			done, err := s.resolvePending(ctx)
			if err != nil || !done {
				return err
			}
		}
		if s.contextFull() {
			return s.handoff(ctx)
		}
	}
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

// checkBeforeTurn checks cancellation and limits (spec runner steps 1-2).
func (s *session) checkBeforeTurn(ctx context.Context) (bool, error) {
	if stopRequested(ctx) {
		// The request (or the deadline) reached this activation while no
		// model call ran.
		s.decideStop(ctx, "")
		return true, s.finalize(ctx)
	}
	// The first check of an activation reads the flag in the claimed
	// record: the worker listened for the thread's cancel events before it
	// claimed, so a later request has reached ctx. Later turns read the
	// flag again, in case an event was lost.
	cancelled := s.rec.CancelRequested
	if s.flagRead {
		var err error
		if cancelled, err = s.o.Registry.CancelRequested(ctx, s.id()); err != nil {
			return false, err
		}
	}
	s.flagRead = true
	if cancelled {
		s.decideCancelled("cancelled by request")
		return true, s.finalize(ctx)
	}
	s.st.Cost.ElapsedSeconds = s.elapsed()
	err := s.st.Cost.CheckLimits(s.rec.Limits)
	if err == nil && s.budgetStop != nil {
		err = s.budgetStop
	}
	if err != nil {
		var le *thread.LimitError
		if !errors.As(err, &le) {
			return false, err
		}
		s.emit(transcript.TypeLimitExceeded, transcript.LimitExceeded{Code: le.Code, Current: le.Current, Max: le.Max})
		evctx := hooks.LimitContext(s.id(), le)
		s.runHooks(ctx, hooks.EventLimit, evctx)
		dec := s.dispatcher.Decide(hooks.EventLimit, evctx)
		if dec.Action == hooks.Continue {
			// A hook handled the limit; limits do not grow, so the
			// thread still cannot take another turn: it completes with
			// what it has.
			s.decide(thread.StatusCompleted, s.lastAssistantText(), nil, nil)
			return true, s.finalize(ctx)
		}
		s.decide(thread.StatusError, "", nil, &queue.ErrorInfo{Code: le.Code, Message: le.Error()})
		return true, s.finalize(ctx)
	}
	return false, nil
}

func (s *session) elapsed() float64 {
	if s.rec.StartedAt.IsZero() {
		return 0
	}
	return s.o.Now().Sub(s.rec.StartedAt).Seconds()
}

// callModel calls the provider, streaming token deltas into the
// transcript, with error hooks deciding retries. A nil response with nil
// error means the thread's outcome was decided (cancelled or failed).
func (s *session) callModel(ctx context.Context) (*provider.Response, error) {
	req := &provider.Request{
		Model:     s.rec.Model,
		Messages:  s.msgs,
		Tools:     s.toolDefs(),
		MaxTokens: s.w.cfg.MaxOutputTokens,
		Thread: provider.ThreadInfo{
			ID: s.id(), Directive: s.rec.Directive, ParentID: s.rec.ParentID, PreviousThreadID: s.rec.PreviousThreadID,
			ChainIndex: s.rec.ChainIndex, Inputs: s.rec.Inputs, Turn: s.st.Turn + 1,
		},
	}
	// Handed back until RetryAt, and activated a little early: the rest.
	if done, err := s.waitToRetry(ctx, s.st.RetryAt.Sub(s.o.Now())); done || err != nil {
		return nil, err
	}
	s.st.RetryAt = time.Time{}
	for attempt := s.st.ModelAttempts; ; attempt++ {
		start := time.Now()
		resp, err := s.prov.Complete(ctx, req, func(text string) { s.tw.AppendDelta(text) })
		if err == nil {
			s.st.ModelAttempts = 0
			s.w.metrics.observeTurn(s.rec.Directive, s.rec.Model, time.Since(start))
			return resp, nil
		}
		if cause := context.Cause(ctx); cause != nil {
			if stopRequested(ctx) {
				s.decideStop(ctx, "during the model call")
				return nil, nil
			}
			return nil, cause
		}
		pe := provider.Classify(err)
		s.w.metrics.providerError(pe.Class)
		code := "provider_" + pe.Class
		evctx := hooks.ErrorContext(s.id(), pe.Error(), pe.Class, attempt+1, pe.RetryAfter)
		// Decided before the hooks run (control hooks decide, item actions
		// do not), so that the event says whether the call is retried.
		dec := s.dispatcher.Decide(hooks.EventError, evctx)
		s.emit(transcript.TypeThreadError, transcript.Error{Class: pe.Class, Code: code, Message: pe.Error(), Retryable: dec.Action == hooks.Retry})
		s.runHooks(ctx, hooks.EventError, evctx)
		if dec.Action != hooks.Retry {
			s.decide(thread.StatusError, "", nil, &queue.ErrorInfo{Code: code, Message: pe.Error()})
			return nil, nil
		}
		if dec.Delay >= s.w.cfg.RetryHandBack {
			return nil, s.handBackForRetry(ctx, attempt+1, dec.Delay)
		}
		s.log.Info("model call failed; retrying", "class", pe.Class, "attempt", attempt+1, "delay", dec.Delay)
		if done, err := s.waitToRetry(ctx, dec.Delay); done || err != nil {
			return nil, err
		}
	}
}

// afterResponse records the response, tracks cost and dispatches tool
// calls (spec runner steps 4-7).
func (s *session) afterResponse(ctx context.Context, resp *provider.Response) error {
	// load refused a model without a price; should pricing still fail,
	// the call's tokens and answer are recorded before the thread fails.
	spend, priceErr := s.prov.Cost(s.rec.Model, resp.Usage)
	s.st.Turn++
	s.st.TurnCallsByID = nil // a new turn's tool calls
	s.st.Cost.Turns++
	s.st.Cost.InputTokens += resp.Usage.InputTokens
	s.st.Cost.OutputTokens += resp.Usage.OutputTokens
	s.st.Cost.CacheReadTokens += resp.Usage.CacheReadTokens
	s.st.Cost.CacheWriteTokens += resp.Usage.CacheWriteTokens
	s.st.Cost.Spend += spend
	s.st.TurnSpend = spend
	s.st.LastPromptTokens = resp.Usage.InputTokens + resp.Usage.CacheReadTokens + resp.Usage.CacheWriteTokens
	s.st.SinceResponse = 0
	s.w.metrics.tokens(s.rec.Directive, s.rec.Model, resp.Usage, spend)
	if err := s.boundResponse(ctx, resp); err != nil {
		return err
	}

	s.msgs = append(s.msgs, thread.Message{Role: thread.RoleAssistant, Content: resp.Text, ToolCalls: resp.ToolCalls})
	s.st.SinceResponse++
	s.emit(transcript.TypeCognitionOut, transcript.CognitionOut{
		Content: resp.Text, ToolCalls: resp.ToolCalls, Model: s.rec.Model, Turn: s.st.Turn, Spend: spend,
		Usage: transcript.Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens,
			CacheReadTokens: resp.Usage.CacheReadTokens, CacheWriteTokens: resp.Usage.CacheWriteTokens},
		StopReason: resp.StopReason,
	})
	if priceErr != nil {
		s.decide(thread.StatusError, "", nil, &queue.ErrorInfo{Code: "pricing_error", Message: priceErr.Error()})
		return nil
	}

	if len(resp.ToolCalls) == 0 {
		if len(s.dir.Outputs.Fields) > 0 && !s.st.Nudged {
			s.st.Nudged = true
			s.appendMessage(thread.Message{Role: thread.RoleUser, Content: "This directive declares outputs. Finish by calling " +
				directiveReturnID + " with them."})
			return nil
		}
		s.decide(thread.StatusCompleted, resp.Text, nil, nil)
		return nil
	}
	for _, call := range resp.ToolCalls {
		if err := s.dispatch(ctx, call); err != nil {
			if !stopRequested(ctx) {
				return err
			}
			// A tool's store write or spawn saw the cancelled context.
			s.decideStop(ctx, "during the tool calls")
		}
		if s.st.Final != nil {
			break
		}
		if stopRequested(ctx) {
			break // the loop decides; the remaining calls do not run
		}
	}
	return nil
}

// emitFinal records the decided outcome: thread_cancelled for a cancelled
// thread, else thread_completed with the status (completed, error,
// continued) and, for an error, its code and message.
func (s *session) emitFinal(f *final) {
	if f.Status == thread.StatusCancelled {
		reason := "cancelled"
		if f.Error != nil && f.Error.Message != "" {
			reason = f.Error.Message
		}
		s.emit(transcript.TypeThreadCancelled, transcript.ThreadCancelled{Reason: reason})
		return
	}
	p := transcript.ThreadCompleted{Status: string(f.Status), Result: f.Result, Outputs: stringOutputs(f.Outputs), Cost: s.st.Cost}
	if f.Error != nil {
		p.Error = &transcript.Error{Code: f.Error.Code, Message: f.Error.Message}
	}
	s.emit(transcript.TypeThreadCompleted, p)
}

// stringOutputs renders directive outputs for the transcript, whose
// outputs are text: strings as they are, anything else as JSON.
func stringOutputs(outputs map[string]any) map[string]string {
	if len(outputs) == 0 {
		return nil
	}
	out := make(map[string]string, len(outputs))
	for k, v := range outputs {
		if str, ok := v.(string); ok {
			out[k] = str
			continue
		}
		b, err := json.Marshal(v)
		if err != nil {
			b = []byte(fmt.Sprint(v))
		}
		out[k] = string(b)
	}
	return out
}

// decide records the thread's outcome; finalize applies it.
func (s *session) decide(status thread.Status, result string, outputs map[string]any, e *queue.ErrorInfo) {
	s.st.Final = &final{Status: status, Result: result, Outputs: outputs, Error: e}
}

func (s *session) lastAssistantText() string {
	for i := len(s.msgs) - 1; i >= 0; i-- {
		if s.msgs[i].Role == thread.RoleAssistant && s.msgs[i].Content != "" {
			return s.msgs[i].Content
		}
	}
	return ""
}

// finalize ends the thread with the decided outcome (spec step 14): a
// final transcript segment, then the orchestrator's Finalize (ledger,
// registry, thread.json, waiters, child policy), then after_complete hooks.
func (s *session) finalize(ctx context.Context) error {
	// A cancel request that ended the thread also cancelled ctx; what
	// follows records the end and must not fail for it.
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	f := s.st.Final
	s.st.Cost.ElapsedSeconds = s.elapsed()
	out := orchestratorOutcome(f, s.st.Cost)
	if !s.finalDurable {
		// The outcome and the turn that led to it become durable in one
		// checkpoint; a recovering worker that finds Final in its state
		// only re-runs what follows (restore charges the turn). Here the
		// turn's charge goes with the end, in Finalize's one script.
		s.emitFinal(f)
		if err := s.checkpointTurn(ctx, false); err != nil {
			return err
		}
		s.finalDurable = true
		if key, amount, ok := s.turnCharge(); ok {
			out.Charge = &orchestrator.Charge{Key: key, Amount: amount, Done: func(c ledger.Charged, err error) { _ = s.charged(c, err) }}
		}
	}
	out.Transcript = new(s.tw.Mark()) // with the final segment written
	out.Lease = s.claim.Token
	// The start's thread.json must not land after the final one.
	s.side.Wait()
	events, meta := s.events[:len(s.events):len(s.events)], s.knowledgeMeta()
	s.side.Go(ctx, s.log, "knowledge render", func(ctx context.Context) error { return s.writeKnowledge(ctx, meta, events) })
	if err := s.o.Finalize(ctx, s.rec, s.version, out); err != nil {
		return err
	}
	// Finalize released the lease: nothing renews it from here on.
	s.leaseReleased = true
	if s.stopLease != nil {
		s.stopLease()
	}
	s.w.metrics.finished(s.rec.Directive, string(f.Status))
	if !s.st.AfterComplete { // a handoff ran them already
		s.runHooks(context.WithoutCancel(ctx), hooks.EventAfterComplete, map[string]any{
			"thread_id": s.id(), "cost": toMap(s.st.Cost), "status": string(f.Status), "project_path": ".",
		})
	}
	return nil
}

// waitToRetry waits d (nothing when d <= 0) before a model call's retry.
// done: a cancel request came meanwhile and decided the thread cancelled;
// err: the activation's context ended otherwise.
func (s *session) waitToRetry(ctx context.Context, d time.Duration) (done bool, err error) {
	if d <= 0 {
		return false, nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		if stopRequested(ctx) {
			s.decideStop(ctx, "while waiting to retry")
			return true, nil
		}
		return false, context.Cause(ctx)
	case <-t.C:
		return false, nil
	}
}

// errRetryLater ends an activation that handed its thread back to wait out
// a long retry delay (handBackForRetry): its worker slot is free meanwhile.
var errRetryLater = errors.New("thread handed back until its model call's retry time")

// handBackForRetry checkpoints a thread whose model call is to be retried
// only after delay (attempts failed so far) and schedules the activation
// that retries it: a recover activation at the checkpoint's version, due
// at the retry time, which the lease this activation then releases lets
// claim. The housekeeping that re-enqueues running threads without a lease
// makes the same task (same id), so it cannot run the retry early; a
// cancel meanwhile ends the thread at once (Orchestrator.Cancel finalizes a
// running thread that no activation holds).
func (s *session) handBackForRetry(ctx context.Context, attempts int, delay time.Duration) error {
	s.st.ModelAttempts = attempts
	s.st.RetryAt = s.o.Now().Add(delay).UTC()
	if err := s.checkpoint(ctx); err != nil {
		return err
	}
	act := queue.Activation{ThreadID: s.id(), Reason: "recover"}
	if err := s.o.Enqueuer.Enqueue(ctx, act, s.version, s.rec.Queue, asynqProcessAt(s.st.RetryAt)); err != nil {
		return err
	}
	s.log.Info("model call to retry later; thread handed back", "attempt", attempts, "delay", delay, "retry_at", s.st.RetryAt)
	return errRetryLater
}

// boundResponse keeps a model answer within the worker's bounds before it
// is recorded: a text over MaxResponseBytes is stored whole as an artifact
// and cut (tools.Bound), and a tool call whose input is over
// MaxToolInputBytes has its input stored as an artifact and replaced by a
// note; that call is answered with an error instead of run (dispatch).
// Nothing a model writes can make a segment, the registry's result or the
// worker's memory grow past these bounds.
func (s *session) boundResponse(ctx context.Context, resp *provider.Response) error {
	s.cutInputs = nil
	if len(resp.Text) > s.w.cfg.MaxResponseBytes {
		key := fmt.Sprintf("threads/%s/artifacts/turn-%d-response.txt", s.id(), s.st.Turn)
		b, err := tools.Bound(ctx, s.o.Store, key, tools.Result{Output: resp.Text}, s.w.cfg.MaxResponseBytes)
		if err != nil {
			return err
		}
		s.log.Warn("model answer cut", "bytes", len(resp.Text), "artifact", key)
		resp.Text = b.Output
	}
	for i, c := range resp.ToolCalls {
		if len(c.Input) <= s.w.cfg.MaxToolInputBytes {
			continue
		}
		key := fmt.Sprintf("threads/%s/artifacts/%s-input.json", s.id(), safeName(c.ID))
		if err := s.o.Store.Put(ctx, key, c.Input); err != nil {
			return fmt.Errorf("store the input of call %s: %w", c.ID, err)
		}
		note, _ := json.Marshal(map[string]any{"spool_input_cut": len(c.Input), "artifact": key})
		resp.ToolCalls[i].Input = note
		if s.cutInputs == nil {
			s.cutInputs = map[string]string{}
		}
		s.cutInputs[c.ID] = fmt.Sprintf("the input of this call was %d bytes, over the limit of %d; it was not run (kept at %s)",
			len(c.Input), s.w.cfg.MaxToolInputBytes, key)
	}
	return nil
}
