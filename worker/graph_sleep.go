package worker

import (
	"context"
	"math"
	"time"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// sleepStep is a sleep node: the run waits, holding no slot, until the
// step's wake time, when a delayed activation continues it. The wake
// time is fixed when the step starts and kept in its pending step, so
// the checkpoint that makes the sleep durable holds it: an activation
// that takes the run over (its worker died, or its wake was lost and
// housekeeping found the run again by the registry's wake_at) sleeps to
// the same time, never less and never twice. A wake that comes early (a
// duplicate, a skewed clock) suspends the run again until then.
//
// The run's duration limit counts sleeping time: a sleep that would end
// past it is woken at the limit instead, where the walk ends the run
// duration_seconds_exceeded. A cancel ends a sleeping run at once (it
// holds no lease: the cancel finalizes it), and the wake that comes
// later finds it ended. A resumed run keeps the wake time of the sleep
// it carries.
type sleepStep struct{}

// start starts a sleep node: its wake time from for or until, resolved
// now; a sleep already due (for 0, an until past) ends at once.
func (k sleepStep) start(ctx context.Context, r *graphRun, s *stepRun) (stepEnd, error) {
	now := r.o.Now().UTC()
	wake, err := graph.SleepWake(s.n, s.scope, now)
	if err != nil {
		return stepFailed(err), nil
	}
	if !wake.After(now) {
		return stepOK(slept(now, now)), nil
	}
	p := &pendingStep{Step: s.step, Node: s.n.Name, Kind: pendingSleep, Attempt: s.attempt, StartedAt: now, WakeAt: wake}
	r.cp.Pending = p
	r.emit(transcript.TypeStepStarted, transcript.StepStarted{Step: s.step, Node: s.n.Name, Kind: s.n.Kind, Attempt: s.attempt,
		StartedAt: now.Format(time.RFC3339Nano)})
	return k.resume(ctx, r, s, p, true)
}

// resume ends the step once its wake time has come, else suspends the
// run until then (or its duration limit, when that comes first); the
// first time, the wake time is made durable first.
func (sleepStep) resume(ctx context.Context, r *graphRun, _ *stepRun, p *pendingStep, first bool) (stepEnd, error) {
	now := r.o.Now()
	if !now.Before(p.WakeAt) {
		return stepOK(slept(p.StartedAt, now)), nil
	}
	if first {
		r.emit(transcript.TypeGraphWaiting, transcript.GraphWaiting{WaitingFor: registry.WaitingForSleep, Step: p.Step, Node: p.Node,
			WakeAt: p.WakeAt.UTC().Format(time.RFC3339Nano)})
		if err := r.checkpoint(ctx); err != nil {
			return stepEnd{}, err
		}
		fault("graph:sleep_checkpointed")
	}
	at := p.WakeAt
	if end, ok := durationEnd(r.rec); ok && end.Before(at) {
		at = end
	}
	o, err := r.handBackAt(ctx, at, registry.WaitingForSleep)
	if err != nil {
		return stepEnd{}, err
	}
	r.log.Info("graph run sleeping", "step", p.Step, "node", p.Node, "until", p.WakeAt, "wakes_at", at)
	o.kind = suspend
	return stepOpen(o), nil
}

// reason: the run waits out a time, as a retry's backoff does.
func (sleepStep) reason() string { return transcript.ReasonRetryWait }

// carry keeps the sleep's wake time: a resumed run sleeps to the same end.
func (sleepStep) carry(_ context.Context, _ *graphRun, _ string, p *pendingStep) (*pendingStep, error) {
	return &pendingStep{Step: p.Step, Node: p.Node, Kind: p.Kind, Attempt: p.Attempt, StartedAt: p.StartedAt, WakeAt: p.WakeAt}, nil
}

// slept is a sleep step's result: the seconds from its start to its
// wake, to the millisecond.
func slept(from, to time.Time) map[string]any {
	return map[string]any{"slept_seconds": math.Round(to.Sub(from).Seconds()*1000) / 1000}
}
