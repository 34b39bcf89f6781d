package worker

import (
	"context"
	"errors"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// failNow finalizes a thread that cannot run at all (bad model, broken
// bundle) with an error, at the claimed version.
func (s *session) failNow(ctx context.Context, code, msg string) error {
	s.st.Final = &final{Status: thread.StatusError, Error: &registry.ErrorInfo{Code: code, Message: msg}}
	s.st.Cost = s.rec.Cost
	if s.tw == nil {
		tw, err := transcript.OpenWriter(ctx, s.store, s.rec.ThreadID, s.signer, s.keyring, orchestrator.RegistryMark(s.rec))
		if err != nil {
			return err
		}
		s.tw = tw
	}
	return s.finalize(ctx)
}

// failOnPermanent turns an error in setup that no retry can fix into a
// failed thread; infrastructure errors go back to asynq.
func (s *session) failOnPermanent(ctx context.Context, err error) error {
	var pe *permanentError
	if errors.As(err, &pe) {
		return s.failNow(ctx, pe.code, pe.msg)
	}
	return err
}

// isIntegrity reports whether err says a transcript does not verify: a
// tampered or missing segment, a bad or unknown signature. No retry can
// mend that.
func isIntegrity(err error) bool {
	return err != nil && (errors.Is(err, transcript.ErrTampered) || errors.Is(err, transcript.ErrBadSignature) ||
		errors.Is(err, transcript.ErrUnknownKey))
}

// failIntegrity ends a thread whose transcript (or one it builds on) does
// not verify, instead of failing the activation, which asynq would retry
// forever: error integrity_failed, naming what did not verify, or
// cancelled when a cancel was requested (a cancel always ends a thread,
// whatever its transcript). When the thread's own transcript did not
// open, no final segment can be appended to it: Finalize records the end
// in the registry and thread.json only.
func (s *session) failIntegrity(ctx context.Context, cause error) error {
	ctx, cancel := detachCancel(ctx)
	defer cancel()
	s.log.Error("transcript does not verify; the thread ends", "error", cause)
	code, status := "integrity_failed", thread.StatusError
	msg := "the transcript does not verify: " + cause.Error()
	if s.rec.CancelRequested || stopRequested(ctx) {
		code, status = "cancelled", thread.StatusCancelled
		msg = "cancelled; " + msg
	}
	if s.tw != nil {
		s.st.decide(status, "", nil, &registry.ErrorInfo{Code: code, Message: msg})
		return s.finalize(ctx)
	}
	out := orchestrator.Outcome{Status: status, Error: &registry.ErrorInfo{Code: code, Message: msg}, Cost: s.rec.Cost, Lease: s.claim.Token}
	if err := s.o.Finalize(ctx, s.rec, s.version, out); err != nil {
		return err
	}
	s.leaseReleased = true
	if s.stopLease != nil {
		s.stopLease()
	}
	s.w.metrics.finished(s.rec.Directive, string(status))
	return nil
}

// permanentError is a setup failure no retry can fix: the thread fails
// with code (failOnPermanent).
type permanentError struct{ code, msg string }

func (e *permanentError) Error() string { return e.code + ": " + e.msg }
