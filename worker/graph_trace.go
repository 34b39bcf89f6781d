package worker

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/telemetry"
)

// A graph run's spans: its activation's (startActivation, with the
// graph), and in it a span per step (spool.graph.step: graph, node,
// step, kind, attempt, status). The step's context carries its span, so
// the children a step starts (orchestrator.Start takes the span in the
// context as their trace parent) are under their step, in the tree's one
// trace. A step that waits across activations (children, an approval)
// has a span in each activation that works on it, ended "waiting" until
// the one that completes it. Each completed step counts in
// spool_graph_steps_total by graph and status.

// stepTrace is the span of the step an activation works on.
type stepTrace struct {
	span trace.Span
	step int
	node string
}

// startStep starts the span of the step at the run's cursor: the step in
// flight (cp.Pending), else the next node's. Call it right before
// r.stepOn, with the context it returns.
func (r *graphRun) startStep(ctx context.Context) (context.Context, *stepTrace) {
	st := &stepTrace{step: r.cp.Step + 1, node: r.cp.NextNode}
	attempt := 1
	if r.cp.Attempt != nil {
		attempt = r.cp.Attempt[st.node] + 1
	}
	if p := r.cp.Pending; p != nil {
		st.step, st.node, attempt = p.Step, p.Node, p.Attempt
	}
	kind := ""
	if n := r.g.Node(st.node); n != nil {
		kind = n.Kind
	}
	ctx, st.span = r.o.Tracer().Start(ctx, telemetry.SpanGraphStep, trace.WithAttributes(
		telemetry.ThreadID.String(r.id()), telemetry.Graph.String(r.g.Name), telemetry.GraphNode.String(st.node),
		telemetry.GraphStep.Int(st.step), telemetry.GraphKind.String(kind), telemetry.GraphAttempt.Int(attempt)))
	return ctx, st
}

// endStep ends the step's span with its status: the step's own (ok,
// error, retry) when it completed in this activation, else waiting (it
// suspended, the run holds no slot), handed_back or failed (the
// activation failed; the step runs again).
func (r *graphRun) endStep(st *stepTrace, o outcome, err error) {
	status := r.stepStatus(st, o, err)
	st.span.SetAttributes(telemetry.GraphStatus.String(status))
	switch status {
	case graph.StepStatusOK, graph.StepStatusRetry:
		r.w.metrics.graphStep(r.g.Name, status)
	case graph.StepStatusError:
		r.w.metrics.graphStep(r.g.Name, status)
		st.span.SetStatus(codes.Error, "the step failed")
	case "failed":
		st.span.RecordError(err)
		st.span.SetStatus(codes.Error, err.Error())
	}
	st.span.End()
}

// stepStatus is how st's step stands after the activation worked on it.
func (r *graphRun) stepStatus(st *stepTrace, o outcome, err error) string {
	switch {
	case err != nil && r.cp.Step < st.step:
		return "failed"
	case r.cp.Step < st.step || r.cp.Pending != nil && r.cp.Pending.Step == st.step:
		if o.kind == handBack {
			return "handed_back"
		}
		return "waiting"
	case r.cp.NextNode == st.node && !r.cp.RetryAt.IsZero():
		return graph.StepStatusRetry
	}
	if le, ok := r.state["_last_error"].(map[string]any); ok && fmt.Sprint(le["step"]) == fmt.Sprint(st.step) {
		return graph.StepStatusError
	}
	return graph.StepStatusOK
}
