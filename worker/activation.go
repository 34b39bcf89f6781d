package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

func newToken() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// errLeaseLost ends an activation whose thread another activation took over.
var errLeaseLost = errors.New("lease lost")

// handle is the asynq handler of TypeActivate.
func (w *Worker) handle(ctx context.Context, t *asynq.Task) error {
	act, err := queue.ParseActivation(t)
	if err != nil {
		return fmt.Errorf("%w: %w", err, asynq.SkipRetry)
	}
	if w.cfg.Serves != nil {
		ok, err := w.cfg.Serves(ctx, act.ThreadID)
		if err != nil {
			return err
		}
		if !ok {
			return errNotServed
		}
	}
	taskID, _ := asynq.GetTaskID(ctx)
	log := w.log.With("thread_id", act.ThreadID, "reason", act.Reason)
	d := w.deps()
	ttl := d.leaseTTL
	token := w.token + "-" + newToken()
	// Listen for the thread's cancel before claiming it: a cancel requested
	// before the claim is in the claimed record (the session's first check
	// reads it there), one requested after reaches actx.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctl := &control{cancel: cancel}
	defer w.track(act.ThreadID, token, ctl)()
	claim, err := d.acts.Claim(ctx, act.ThreadID, act.Reason, act.Seq, token, taskID, ttl)
	if errors.Is(err, registry.ErrNotClaimable) || errors.Is(err, registry.ErrNotFound) {
		log.Debug("activation dropped", "error", err)
		return nil
	}
	if err != nil {
		return err
	}
	ctl.renewed.Store(time.Now().UnixNano()) // the claim set the lease
	// The duration limit stops the model call or tool in flight, not only
	// the next turn.
	defer deadline(claim.Record, w.o.Now(), cancel)()
	actx, span := w.startActivation(actx, act, claim.Record)
	// A store operation that fails and is tried again marks the thread
	// stalled on the store, until one gets an answer (storeWatch).
	actx = withStallMark(actx, act.ThreadID, claim.Record.Stalled != nil)

	// The heartbeat runs until the session returns, not until actx ends:
	// a cancel request cancels actx, and the lease must hold while the
	// session finalizes the cancelled thread on a detached context.
	hbctx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		tick := time.NewTicker(ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-hbctx.Done():
				return
			case <-tick.C:
				if !ctl.renewalDue(ttl) {
					continue // a checkpoint renewed it
				}
				err := d.acts.Heartbeat(hbctx, act.ThreadID, token, ttl)
				if errors.Is(err, registry.ErrLeaseLost) {
					cancel(errLeaseLost)
					return
				}
				if err == nil {
					ctl.renewed.Store(time.Now().UnixNano())
				}
			}
		}
	}()

	a := func() activation {
		return activation{w: w, o: w.o, deps: d, claim: claim, act: act, log: log, stopLease: stopHB, ctl: ctl}
	}
	// The activation's path: a graph run's walk, or a thread's turns.
	var released func() bool
	var outcome func() (*final, bool)
	if claim.Record.IsGraph() {
		g := &graphRun{activation: a()}
		err = g.run(actx)
		released = func() bool { return g.leaseReleased }
		outcome = func() (*final, bool) { return g.cp.Final, false }
	} else {
		s := &session{activation: a()}
		err = s.run(actx)
		released = func() bool { return s.leaseReleased }
		outcome = func() (*final, bool) { return s.st.Final, s.st.Handoff != "" }
	}
	stopHB()
	cancel(nil)
	<-hbDone
	// A clean end releases the lease so the next activation can claim at
	// once (a finished thread's Finalize released it already). A failed
	// activation keeps it until it lapses: that is the backoff before
	// asynq's retry or the recoverer takes the thread again.
	if (err == nil && !released()) || errors.Is(err, errDraining) || errors.Is(err, errRetryLater) {
		_ = d.acts.Release(context.WithoutCancel(ctx), act.ThreadID, token)
	}

	if err != nil && !errors.Is(err, errDraining) && !errors.Is(err, errRetryLater) {
		// Whatever stopped this activation, if another one holds the
		// thread now, it is a takeover, not a failure to retry.
		if hb := d.acts.Heartbeat(context.WithoutCancel(ctx), act.ThreadID, token, ttl); errors.Is(hb, registry.ErrLeaseLost) {
			// The activation's own error is detail only: wrapped, a
			// hand-back error (errDraining) would decide the outcome
			// instead of the takeover.
			err = fmt.Errorf("%w (%v)", errLeaseLost, err) //nolint:errorlint // see above
		}
	}
	f, handedOff := outcome()
	if err == nil && f != nil && claim.Record.IsGraph() && released() {
		w.metrics.graphRun(claim.Record.Directive, string(f.Status))
	}
	endActivation(span, err, f, handedOff)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errRetryLater):
		return nil // the activation due at the retry time continues the thread
	case errors.Is(err, errLeaseLost), errors.Is(err, registry.ErrConflict), errors.Is(err, transcript.ErrSegmentExists):
		log.Warn("activation stopped: another activation owns the thread", "error", err)
		return nil
	case errors.Is(err, errCancelledLoading):
		log.Info("activation handed back: cancel requested while the thread loaded", "error", err)
		return err
	case errors.Is(err, errDraining):
		log.Info("activation handed back for shutdown")
		return err
	}
	log.Error("activation failed; asynq will retry it", "error", err)
	return err
}
