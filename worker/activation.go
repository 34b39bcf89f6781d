package worker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
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
	if err := w.served(ctx, act.ThreadID); err != nil {
		return err
	}
	taskID, _ := asynq.GetTaskID(ctx)
	log := w.log.With("thread_id", act.ThreadID, "reason", act.Reason)
	d := w.deps()
	l := activationLease{acts: d.acts, id: act.ThreadID, token: w.token + "-" + newToken(), ttl: d.leaseTTL}
	// Listen for the thread's cancel before claiming it: a cancel requested
	// before the claim is in the claimed record (the session's first check
	// reads it there), one requested after reaches actx.
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ctl := &control{cancel: cancel}
	defer w.track(act.ThreadID, l.token, ctl)()
	// Admission first (adm_claim before claim.lua), its grant released at
	// whatever end this activation has (deferred first: it runs last).
	g, run, err := w.admitClaim(ctx, act, l.token, ctl, l.ttl)
	if err != nil || !run {
		return err
	}
	defer w.admitEnd(ctx, g)
	claim, err := d.acts.ClaimAdmitted(ctx, act.ThreadID, act.Reason, act.Seq, l.token, taskID, l.ttl, g.admissionID())
	if errors.Is(err, registry.ErrNotClaimable) || errors.Is(err, registry.ErrNotFound) {
		log.Debug("activation dropped", "error", err)
		return nil
	}
	if err != nil {
		return err
	}
	ctl.renewed.Store(time.Now().UnixNano()) // the claim set the lease
	g.claimed(claim)
	// The duration limit stops the model call or tool in flight, not only
	// the next turn.
	defer deadline(claim.Record, w.o.Now(), cancel)()
	actx, span := w.startActivation(actx, act, claim.Record)
	grantAttributes(span, g)
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
		l.heartbeat(hbctx, ctl, cancel)
	}()

	end, err := runPath(actx, claim.Record.IsGraph(), func() activation {
		return activation{w: w, o: w.o, deps: d, claim: claim, act: act, log: log, stopLease: stopHB, ctl: ctl, grant: g}
	})
	stopHB()
	g.ended(claim.Record, end, err)
	err = grantLostErr(actx, err)
	cancel(nil)
	<-hbDone
	l.release(ctx, err, end.released)
	if errors.Is(err, errYield) {
		w.yield(ctx, claim.Record, end.version)
	}
	err = l.takenOver(ctx, err)
	if err == nil && end.final != nil && claim.Record.IsGraph() && end.released {
		w.metrics.graphRun(claim.Record.Directive, string(end.final.Status))
	}
	endActivation(span, err, end.final, end.handedOff)
	return activationResult(log, err)
}

// grantLostErr is the error err of an activation that was stopped
// because its admission grant could not be renewed (actx's cause):
// marked errGrantLost, unless it says so already.
func grantLostErr(actx context.Context, err error) error {
	if err != nil && errors.Is(context.Cause(actx), errGrantLost) && !errors.Is(err, errGrantLost) {
		return fmt.Errorf("%w (%v)", errGrantLost, err) //nolint:errorlint // the cause decides, as takenOver's does
	}
	return err
}

// served refuses (errNotServed) a thread this worker does not serve
// (Config.Serves), before it claims it.
func (w *Worker) served(ctx context.Context, id string) error {
	if w.cfg.Serves == nil {
		return nil
	}
	ok, err := w.cfg.Serves(ctx, id)
	if err != nil {
		return err
	}
	if !ok {
		return errNotServed
	}
	return nil
}

// activationLease is the lease an activation holds on its thread: the
// leases' service, the thread, the activation's token and how long the
// lease holds without a heartbeat.
type activationLease struct {
	acts  activationLeases
	id    string
	token string
	ttl   time.Duration
}

// heartbeat renews the lease every third of its ttl, unless a checkpoint
// renewed it meanwhile (control.renewalDue), until ctx ends. A lease
// another activation took over cancels the activation (errLeaseLost).
func (l activationLease) heartbeat(ctx context.Context, ctl *control, cancel context.CancelCauseFunc) {
	tick := time.NewTicker(l.ttl / 3)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if !ctl.renewalDue(l.ttl) {
				continue // a checkpoint renewed it
			}
			err := l.acts.Heartbeat(ctx, l.id, l.token, l.ttl)
			if errors.Is(err, registry.ErrLeaseLost) {
				cancel(errLeaseLost)
				return
			}
			if err == nil {
				ctl.renewed.Store(time.Now().UnixNano())
			}
		}
	}
}

// release releases the lease after a clean end, so the next activation
// can claim at once (unless the path released it: a finished thread's
// Finalize did), and after a hand-back (errDraining, errRetryLater). A
// failed activation keeps it until it lapses: that is the backoff before
// asynq's retry or the recoverer takes the thread again.
func (l activationLease) release(ctx context.Context, err error, released bool) {
	if (err == nil && !released) || errors.Is(err, errDraining) || errors.Is(err, errRetryLater) || errors.Is(err, errYield) {
		_ = l.acts.Release(context.WithoutCancel(ctx), l.id, l.token)
	}
}

// takenOver is err, the error that stopped the activation, as
// errLeaseLost when another activation holds the thread now: whatever
// stopped this one, it is a takeover, not a failure to retry. A clean end
// and a hand-back are left as they are.
func (l activationLease) takenOver(ctx context.Context, err error) error {
	if err == nil || errors.Is(err, errDraining) || errors.Is(err, errRetryLater) || errors.Is(err, errYield) {
		return err
	}
	if hb := l.acts.Heartbeat(context.WithoutCancel(ctx), l.id, l.token, l.ttl); errors.Is(hb, registry.ErrLeaseLost) {
		// The activation's own error is detail only: wrapped, a
		// hand-back error (errDraining) would decide the outcome
		// instead of the takeover.
		return fmt.Errorf("%w (%v)", errLeaseLost, err) //nolint:errorlint // see above
	}
	return err
}

// pathEnd is how an activation's path ended: whether it released the
// lease itself (with the thread's end), the outcome if one was decided,
// and whether the thread handed off.
type pathEnd struct {
	released  bool
	final     *final
	handedOff bool
	// version is the registry version the activation last held (a
	// yield's recovery names it).
	version int64
	// spend is the thread's spend at the end as its commits recorded it
	// (USD): what the activation spent is it less the spend at its claim.
	spend float64
}

// activationResult is what handle answers asynq for an activation that
// ended with err, which it logs: nil for a clean end, a retry wait (the
// activation due at the retry time continues the thread) and a takeover;
// err for a hand-back (a cancel while the thread loaded, a shutdown) and
// a failure, which asynq runs again.
func activationResult(log *slog.Logger, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errRetryLater):
		return nil // the activation due at the retry time continues the thread
	case errors.Is(err, errYield):
		log.Info("activation yielded its slot: its thread waits for admission again")
		return nil
	case errors.Is(err, errGrantLost):
		log.Warn("activation stopped: its admission grant is gone; asynq runs it again", "error", err)
		return err
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
