package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// errCancelRequested is the cause with which listenCancels cancels the
// context of an activation whose thread's cancel was requested.
var errCancelRequested = errors.New("cancel requested")

// errCancelledLoading hands an activation back when a cancel request came
// while it loaded the thread (bundle, transcript), before it held anything
// to finalize with. Like a drain, the activation releases its lease and
// asynq runs the task again within a second; that activation reads the
// cancel flag before the thread's first turn.
var errCancelledLoading = fmt.Errorf("cancel requested while the thread loaded: %w", errDraining)

// cancelFinalizeTimeout bounds the finalization of a thread whose
// activation context a cancel request cancelled. The activation's
// heartbeat keeps the lease meanwhile; a finalization that cannot finish
// in this time fails the activation, and the recovering worker finishes it.
const cancelFinalizeTimeout = 30 * time.Second

// errInterrupted is the cause with which an interrupt (`spool thread
// interrupt`) cancels the turn in flight: its model call or tool stops,
// and the thread goes on with the person's message.
var errInterrupted = errors.New("interrupted by a person's message")

// errDurationExceeded is the cause with which the activation's deadline
// timer cancels its context when the thread's duration limit is reached
// (Limits.Duration after StartedAt): it stops the model call or tool in
// flight as a cancel request does, and the thread ends with
// duration_exceeded.
var errDurationExceeded = errors.New("duration limit reached")

// stopRequested reports whether ctx was cancelled because the thread
// must end: its cancel was requested or its duration limit was reached,
// rather than because the lease was lost or the worker is shutting down.
// Every place that finds ctx cancelled decides the outcome from the cause
// with decideStop.
func stopRequested(ctx context.Context) bool {
	c := context.Cause(ctx)
	return errors.Is(c, errCancelRequested) || errors.Is(c, errDurationExceeded)
}

// detachCancel returns ctx unchanged, or, when a cancel request or the
// duration limit cancelled it, a context that is not cancelled, bounded by
// cancelFinalizeTimeout: stopping a thread stops its work (the model call,
// its tools), not the registry, ledger and blob store writes that record
// that it stopped. A lease lost meanwhile still stops those writes, at the
// registry fence.
func detachCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	if !stopRequested(ctx) {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), cancelFinalizeTimeout)
}

// handBackOnCancel turns an error of loading the thread that a cancel
// request (or the duration limit) caused into errCancelledLoading.
func handBackOnCancel(ctx context.Context, err error) error {
	if err != nil && stopRequested(ctx) {
		// The load error is detail only: wrapped, its own sentinel (a
		// conflict, a lost lease) would decide the outcome instead of
		// the hand-back.
		return fmt.Errorf("%w (%v)", errCancelledLoading, err) //nolint:errorlint // see above
	}
	return err
}

// decideCancelled records that the thread ends cancelled; how names where
// the request found it.
func (st *state) decideCancelled(how string) {
	st.decide(thread.StatusCancelled, "", nil, &registry.ErrorInfo{Code: "cancelled", Message: how})
}

// decideStop records the outcome of a thread whose activation context was
// stopped (stopRequested), from the cause: cancelled for a cancel request,
// an error duration_exceeded for the duration limit; where names what the
// stop interrupted ("during the model call"; "" for nothing in flight).
func (s *session) decideStop(ctx context.Context, where string) {
	if errors.Is(context.Cause(ctx), errDurationExceeded) {
		s.st.Cost.ElapsedSeconds = elapsed(s.rec, s.o.Now())
		msg := fmt.Sprintf("the thread reached its duration limit of %gs", s.rec.Limits.Duration)
		if where != "" {
			msg += " " + where
		}
		msg += " (" + thread.RaiseHint(thread.CodeDurationExceeded) + ")"
		s.emit(transcript.TypeLimitExceeded, transcript.LimitExceeded{Code: thread.CodeDurationExceeded, Current: s.st.Cost.ElapsedSeconds, Max: s.rec.Limits.Duration})
		s.st.decide(thread.StatusError, "", nil, &registry.ErrorInfo{Code: thread.CodeDurationExceeded, Message: msg})
		return
	}
	if where == "" {
		s.st.decideCancelled("cancelled by request")
		return
	}
	s.st.decideCancelled("cancelled " + where)
}

// stoppedWhile is the answer to a tool call that a stop interrupted.
func stoppedWhile(ctx context.Context) string {
	if errors.Is(context.Cause(ctx), errDurationExceeded) {
		return "stopped: the thread reached its duration limit while this tool ran"
	}
	return "cancelled: the thread was cancelled while this tool ran"
}

// deadline arms the activation's duration timer: at StartedAt +
// Limits.Duration, stop cancels the activation with errDurationExceeded.
// The returned func disarms it.
func deadline(rec *registry.Record, now time.Time, stop context.CancelCauseFunc) func() {
	end, ok := durationEnd(rec)
	if !ok {
		return func() {}
	}
	t := time.AfterFunc(max(end.Sub(now), 0), func() { stop(errDurationExceeded) })
	return func() { t.Stop() }
}

// durationEnd is when the thread reaches its duration limit; false when
// it has none or has not started. The time it was paused does not count.
func durationEnd(rec *registry.Record) (time.Time, bool) {
	if rec.StartedAt.IsZero() || rec.Limits.Duration <= 0 {
		return time.Time{}, false
	}
	return runStart(rec).Add(time.Duration(rec.Limits.Duration * float64(time.Second))), true
}

// runStart is when the thread of rec would have started had it never
// been paused: its start, later by the time it was paused.
func runStart(rec *registry.Record) time.Time {
	return rec.StartedAt.Add(time.Duration(rec.PausedMS) * time.Millisecond)
}

// stopError ends an activation that a stop reached: a cancel request or
// the duration limit that stopped the activation's context (where names
// what it interrupted; "" nothing in flight), or a cancel flag read
// between turns. The sites that find a stop return it; the activation
// decides the stop in one place (stopped).
type stopError struct{ where string }

func (e *stopError) Error() string {
	if e.where == "" {
		return "stopped"
	}
	return "stopped " + e.where
}

// stopped is the one place that decides a stop: an activation that a
// cancel request or the duration limit reached (a *stopError from the
// turn, or a cancelled context wherever it landed: a checkpoint, a hook,
// a wait) ends the thread now, on a detached context: cancelled, or
// duration_exceeded (decideStop), instead of failing the activation,
// which would leave the thread to lease expiry and recovery. An outcome
// or a handoff decided before the stop stands.
func (s *session) stopped(ctx context.Context, cause error) error {
	stopped := ctx
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	s.log.Info("thread stopped; ending it", "cause", context.Cause(stopped), "error", cause)
	if s.st.Final == nil && s.st.Handoff != "" {
		return s.completeHandoff(ctx)
	}
	if s.st.Final == nil {
		where := ""
		if se := (*stopError)(nil); errors.As(cause, &se) {
			where = se.where
		}
		s.decideStop(stopped, where)
	}
	return s.finalize(ctx)
}
