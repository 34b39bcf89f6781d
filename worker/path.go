package worker

import (
	"context"
	"errors"
)

// path is what differs between the two kinds of activation, a thread's
// turns (session) and a graph run's walk (graphRun); runActivation is the
// lifecycle they share. A stop (a cancel request, the duration limit) is
// decided in runActivation only: a path's steps report what they found
// (a stopError, or an error with a stop requested on ctx), and the
// skeleton hands the run to the path's stopped.
type path interface {
	// pastDuration: the claimed run is past its duration limit, so
	// loading it is not cut short by that limit.
	pastDuration() bool
	// load reads what the run needs (bundle, directive or graph, tools);
	// a run that cannot run at all is ended there (decided).
	load(ctx context.Context) error
	// decided: the run has its outcome (load ended it, or a final
	// outcome was decided already) and there is nothing more to do.
	decided() bool
	// restore opens the transcript and the last checkpoint: fresh when
	// the run has none yet.
	restore(ctx context.Context) (fresh bool, err error)
	// proceed begins a fresh run, then runs it: the turn loop, the walk.
	proceed(ctx context.Context, fresh bool) error
	// unverifiable ends a run whose transcript or stored state does not
	// verify (no retry mends that), deciding from err's cause.
	unverifiable(ctx context.Context, err error) error
	// stopped ends a run a stop reached, with cause the error that
	// reported it.
	stopped(ctx context.Context, cause error) error
	// handsBack: err is the path's own hand-back, which a stop requested
	// meanwhile does not turn into a stop (the next activation finds it).
	handsBack(err error) bool
	// close waits for what the activation left running (side writes,
	// the live feed) once the path returned.
	close()
	// end is how the path ended, for handle.
	end() pathEnd
}

// runActivation runs p's activation: load, restore, proceed, and the
// ends every path shares (a load that a stop interrupted hands back, a
// store that does not verify ends the run, a stop ends it stopped).
func runActivation(ctx context.Context, p path) error {
	defer p.close()
	// Loading is not cut short by the run's duration limit: a run woken
	// past it (it waited for children, a person, a rate limit) loads,
	// then ends duration_seconds_exceeded, rather than failing its load
	// at every wake. A cancel or a lost lease still stops the load
	// (handBackOnCancel).
	lctx, stop := ctx, func() {}
	if errors.Is(context.Cause(ctx), errDurationExceeded) || p.pastDuration() {
		lctx, stop = context.WithTimeout(context.WithoutCancel(ctx), cancelFinalizeTimeout)
	}
	defer stop()
	if err := p.load(lctx); err != nil || p.decided() {
		// nil: load ended the run (failNow) or found it decided.
		return handBackOnCancel(ctx, err)
	}
	fresh, err := p.restore(lctx)
	if unverified(err) {
		return p.unverifiable(ctx, err)
	}
	if err != nil {
		return handBackOnCancel(ctx, err)
	}
	err = p.proceed(ctx, fresh)
	if unverified(err) {
		// A transcript the run builds on (a continuation's previous
		// thread, a resumed run's) or a stored result does not verify.
		return p.unverifiable(ctx, err)
	}
	if se := (*stopError)(nil); errors.As(err, &se) || (err != nil && stopRequested(ctx) && !p.handsBack(err)) {
		// A stop a step found, or one that reached the activation where
		// nothing decides on it (a checkpoint, a hook, a wait: the call
		// that saw the cancelled context failed): the run is cancelled
		// or out of time, not failed.
		return p.stopped(ctx, err)
	}
	return err
}

// unverified reports whether err says what the run restores from does
// not verify: a transcript (isIntegrity) or a stored state or result.
func unverified(err error) bool {
	return isIntegrity(err) || errors.Is(err, errStateInvalid)
}

// runPath runs the path of the activation newActivation makes: a graph
// run's walk (isGraph), or a thread's turns.
func runPath(ctx context.Context, isGraph bool, newActivation func() activation) (pathEnd, error) {
	var p path
	if isGraph {
		p = newGraphRun(newActivation)
	} else {
		p = &session{activation: newActivation()}
	}
	err := runActivation(ctx, p)
	return p.end(), err
}
