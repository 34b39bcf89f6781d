package worker

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"time"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// errRetryLater ends an activation that handed its thread back to wait out
// a long retry delay (handBackForRetry): its worker slot is free meanwhile.
var errRetryLater = errors.New("thread handed back until its model call's retry time")

// callModel calls the provider, streaming token deltas into the
// transcript, with error hooks deciding retries. A nil response with nil
// error means the thread's outcome was decided (cancelled or failed).
func (s *session) callModel(ctx context.Context) (*provider.Response, error) {
	inCallOrder(s.msgs)
	req := &provider.Request{
		Model:     s.rec.Model,
		Messages:  s.msgs,
		Tools:     s.tools.toolDefs(),
		MaxTokens: s.w.cfg.MaxOutputTokens,
		Thread: provider.ThreadInfo{
			ID: s.id(), Directive: s.rec.Directive, ParentID: s.rec.ParentID, PreviousThreadID: s.rec.PreviousThreadID,
			ChainIndex: s.rec.ChainIndex, Inputs: s.rec.Inputs, Turn: s.st.Turn + 1,
		},
	}
	// Handed back until RetryAt, and activated a little early: the rest.
	if err := waitToRetry(ctx, s.st.RetryAt.Sub(s.o.Now())); err != nil {
		return nil, err
	}
	s.st.RetryAt = time.Time{}
	for {
		adm, err := s.admit(ctx, req)
		if err != nil {
			return nil, err
		}
		start := time.Now()
		release := s.rates.holdLease(adm)
		mctx, span := s.tracer.startModelCall(ctx, req, s.st.ModelAttempts+s.st.RateLimited)
		s.deltas.call(s.st.Turn+1, s.st.ModelAttempts+s.st.RateLimited)
		req.OnToolDelta = s.deltas.addTool
		resp, err := s.prov.Complete(mctx, req, func(text string) {
			s.tw.AppendDelta(text)
			s.deltas.add(text)
		})
		s.tracer.endModelCall(span, resp, err)
		release()
		s.rates.settle(ctx, adm, resp, err)
		if err == nil {
			s.st.ModelAttempts, s.st.RateLimited = 0, 0
			s.w.metrics.observeTurn(s.rec.Directive, s.rec.Model, time.Since(start))
			return resp, nil
		}
		if cause := context.Cause(ctx); cause != nil {
			return nil, cause // a stop is decided by the turn (stopAfter)
		}
		pe := provider.Classify(err)
		s.w.metrics.providerError(pe.Class)
		code := "provider_" + pe.Class
		// A rate limit is the provider saying "slow down", not a failure:
		// its attempts are counted apart, so that waiting it out uses up
		// none of the retries of the other errors.
		slowDown := pe.Class == provider.ClassRateLimited
		attempt := s.st.ModelAttempts + 1
		if slowDown {
			attempt = s.st.RateLimited + 1
		}
		evctx := hooks.ErrorContext(s.id(), pe.Error(), pe.Class, attempt, pe.RetryAfter)
		// Decided before the hooks run (control hooks decide, item actions
		// do not), so that the event says whether the call is retried.
		dec := s.dispatcher.Decide(hooks.EventError, evctx)
		s.emit(transcript.TypeThreadError, transcript.Error{Class: pe.Class, Code: code, Message: pe.Error(), Retryable: dec.Action == hooks.Retry})
		s.runHooks(ctx, hooks.EventError, evctx)
		if dec.Action != hooks.Retry {
			s.st.decide(thread.StatusError, "", nil, &registry.ErrorInfo{Code: code, Message: pe.Error()})
			return nil, nil
		}
		if slowDown {
			s.st.RateLimited = attempt
			return nil, s.handBackForSlowDown(ctx, dec.Delay)
		}
		s.st.ModelAttempts = attempt
		if dec.Delay >= s.w.cfg.RetryHandBack {
			return nil, s.handBackForRetry(ctx, dec.Delay)
		}
		s.log.Info("model call failed; retrying", "class", pe.Class, "attempt", attempt, "delay", dec.Delay)
		if err := waitToRetry(ctx, dec.Delay); err != nil {
			return nil, err
		}
	}
}

// waitToRetry waits d (nothing when d <= 0) before a model call's retry;
// the error is the activation context's cause when it ends first (a stop
// is decided by the turn: stopAfter).
func waitToRetry(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// handBackForRetry checkpoints a thread whose model call is to be retried
// only after delay (State.ModelAttempts failed so far) and schedules the activation
// that retries it: a recover activation at the checkpoint's version, due
// at the retry time, which the lease this activation then releases lets
// claim. The housekeeping that re-enqueues running threads without a lease
// makes the same task (same id), so it cannot run the retry early; a
// cancel meanwhile ends the thread at once (Orchestrator.Cancel finalizes a
// running thread that no activation holds).
func (s *session) handBackForRetry(ctx context.Context, delay time.Duration) error {
	s.st.RetryAt = s.o.Now().Add(delay).UTC()
	if err := s.checkpoint(ctx); err != nil {
		return err
	}
	act := queue.Activation{ThreadID: s.id(), Reason: "recover"}
	if err := s.enq.Enqueue(ctx, act, s.version, s.rec.Queue, asynqProcessAt(s.st.RetryAt)); err != nil {
		return err
	}
	s.log.Info("model call to retry later; thread handed back", "attempt", s.st.ModelAttempts, "delay", delay, "retry_at", s.st.RetryAt)
	return errRetryLater
}

// inCallOrder puts the tool messages that answer the last assistant
// message in the order of its calls, in place: a call that waited for a
// person's approval is answered after the calls of its turn that did not,
// yet the model (and a script's .tool_results) reads the results in the
// order it made the calls. Other messages among them (one a person sent
// meanwhile) keep their places; a result of no call of that message
// stays after those that answer one. The transcript keeps the order in
// which the results came.
func inCallOrder(msgs []thread.Message) {
	a := len(msgs) - 1
	for a >= 0 && msgs[a].Role != thread.RoleAssistant {
		a--
	}
	if a < 0 || len(msgs[a].ToolCalls) < 2 {
		return
	}
	pos := make(map[string]int, len(msgs[a].ToolCalls))
	for i, c := range msgs[a].ToolCalls {
		pos[c.ID] = i
	}
	var at []int // the tool messages' places
	var results []thread.Message
	for i := a + 1; i < len(msgs); i++ {
		if msgs[i].Role == thread.RoleTool {
			at = append(at, i)
			results = append(results, msgs[i])
		}
	}
	order := func(m thread.Message) int {
		if p, ok := pos[m.ToolCallID]; ok {
			return p
		}
		return len(pos)
	}
	slices.SortStableFunc(results, func(x, y thread.Message) int { return cmp.Compare(order(x), order(y)) })
	for i, m := range results {
		msgs[at[i]] = m
	}
}
