package worker

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
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

// cancelRequested reports whether ctx was cancelled because the thread's
// cancel was requested, rather than because the lease was lost or the
// worker is shutting down.
func cancelRequested(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errCancelRequested)
}

// detachCancel returns ctx unchanged, or, when a cancel request cancelled
// it, a context that is not cancelled, bounded by cancelFinalizeTimeout: a
// cancel request stops the thread's work (the model call, its tools), not
// the registry, ledger and blob store writes that record that it stopped.
// A lease lost meanwhile still stops those writes, at the registry fence.
func detachCancel(ctx context.Context) (context.Context, context.CancelFunc) {
	if !cancelRequested(ctx) {
		return ctx, func() {}
	}
	return context.WithTimeout(context.WithoutCancel(ctx), cancelFinalizeTimeout)
}

// handBackOnCancel turns an error of loading the thread that a cancel
// request caused into errCancelledLoading.
func handBackOnCancel(ctx context.Context, err error) error {
	if err != nil && cancelRequested(ctx) {
		return fmt.Errorf("%w (%v)", errCancelledLoading, err)
	}
	return err
}

// decideCancelled records that the thread ends cancelled; how names where
// the request found it.
func (s *session) decideCancelled(how string) {
	s.decide(thread.StatusCancelled, "", nil, &queue.ErrorInfo{Code: "cancelled", Message: how})
}

// stopCancelled ends an activation that a cancel request interrupted
// outside the places that decide the outcome themselves (the model call,
// a tool, the check before a turn): a checkpoint, a hook, a wait. The
// Redis or blob store call that saw the cancelled context failed; instead
// of failing the activation, which would leave the thread to lease expiry
// and recovery, the thread is cancelled now, on a detached context. An
// outcome or a handoff decided before the request stands.
func (s *session) stopCancelled(ctx context.Context, cause error) error {
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	s.log.Info("cancel requested; ending the thread", "error", cause)
	if s.st.Final == nil && s.st.Handoff != "" {
		return s.completeHandoff(ctx)
	}
	if s.st.Final == nil {
		s.decideCancelled("cancelled by request")
	}
	return s.finalize(ctx)
}
