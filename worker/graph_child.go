package worker

import (
	"context"

	"github.com/spool-run/spool/graph"
)

// childStep is an action's directive or graph, run as the step's one
// child: the step plans its id, starts it (adopting it when run again)
// and waits, holding no slot, until its chain ends; the child's result
// is the step's, its failure the step's failure. A resumed run starts
// the step again from its node. An async action only starts its child,
// which runs on as the run's, and ends the step at once (startAsync).
type childStep struct{ windowBase }

// start starts the child of step s's action.
func (childStep) start(ctx context.Context, r *graphRun, s *stepRun) (stepEnd, error) {
	return startChildren(ctx, r, s, pendingChild, 1)
}

// startAsync starts action a's child, which runs on as the run's child:
// the step ends with its id. Its id is planned all the same: a step run
// again adopts it.
func (childStep) startAsync(ctx context.Context, r *graphRun, s *stepRun, a *graph.Action) (stepEnd, error) {
	inputs, err := graph.Params(a.Inputs, s.scope)
	if err != nil {
		return stepFailed(err), nil
	}
	rec, err := r.actions.start(ctx, a, inputs, seed(s.step, 0, s.attempt))
	if err != nil {
		if isInfra(err) {
			return stepEnd{}, err
		}
		r.emitRefused(a, err)
		return stepFailed(refusal(err)), nil
	}
	r.chains.started(a, rec, true)
	s.threadIDs = []string{rec.ThreadID}
	key := "thread_id"
	if a.Graph != "" {
		key = "run_id"
	}
	return stepOK(map[string]any{key: rec.ThreadID, "status": "running"}), nil
}

func (k childStep) resume(ctx context.Context, r *graphRun, s *stepRun, p *pendingStep, first bool) (stepEnd, error) {
	return advanceWindow(ctx, r, k, s, p, first)
}

func (childStep) node() string { return graph.KindAction }

// planLimit: the one child, planned once.
func (childStep) planLimit(*pendingStep, int) int { return 1 }

// result is the child's result, or its failure.
func (childStep) result(ctx context.Context, r *graphRun, _ *stepRun, p *pendingStep) (stepEnd, error) {
	sl := p.Slots["0"]
	if sl.Status != "ok" {
		return stepFailed(&graph.StepError{Code: sl.Code, Message: sl.Message, ThreadID: sl.ThreadID}), nil
	}
	res, err := r.items.result(ctx, "0", sl)
	if err != nil {
		return stepEnd{}, err
	}
	return stepOK(res), nil
}
