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

// stepTracer spans a graph run's steps and counts those completed.
type stepTracer struct {
	tracer  trace.Tracer
	metrics *Metrics
	run     string
	graph   *graph.Graph
}

// stepTrace is the span of the step an activation works on.
type stepTrace struct {
	span trace.Span
	step int
	node string
}

// start starts the span of the step at cp's cursor: the step in flight
// (cp.Pending), else the next node's. Call it right before the step runs
// (graphRun.stepOn), with the context it returns.
func (t stepTracer) start(ctx context.Context, cp *graphCheckpoint) (context.Context, *stepTrace) {
	st := &stepTrace{step: cp.Step + 1, node: cp.NextNode}
	attempt := 1
	if cp.Attempt != nil {
		attempt = cp.Attempt[st.node] + 1
	}
	if p := cp.Pending; p != nil {
		st.step, st.node, attempt = p.Step, p.Node, p.Attempt
	}
	kind := ""
	if n := t.graph.Node(st.node); n != nil {
		kind = n.Kind
	}
	ctx, st.span = t.tracer.Start(ctx, telemetry.SpanGraphStep, trace.WithAttributes(
		telemetry.ThreadID.String(t.run), telemetry.Graph.String(t.graph.Name), telemetry.GraphNode.String(st.node),
		telemetry.GraphStep.Int(st.step), telemetry.GraphKind.String(kind), telemetry.GraphAttempt.Int(attempt)))
	return ctx, st
}

// end ends the step's span with its status (stepStatus), err the
// activation's error if it failed.
func (t stepTracer) end(st *stepTrace, status string, err error) {
	st.span.SetAttributes(telemetry.GraphStatus.String(status))
	switch status {
	case graph.StepStatusOK, graph.StepStatusRetry:
		t.metrics.graphStep(t.graph.Name, status)
	case graph.StepStatusError:
		t.metrics.graphStep(t.graph.Name, status)
		st.span.SetStatus(codes.Error, "the step failed")
	case "failed":
		st.span.RecordError(err)
		st.span.SetStatus(codes.Error, err.Error())
	}
	st.span.End()
}

// stepStatus is how st's step stands after the activation worked on it,
// from the run's checkpoint and state, o and err what the step's
// activation returned: the step's own status (ok, error, retry) when it
// completed, else waiting (it suspended, the run holds no slot),
// handed_back or failed (the activation failed; the step runs again).
func stepStatus(cp *graphCheckpoint, state map[string]any, st *stepTrace, o outcome, err error) string {
	switch {
	case err != nil && cp.Step < st.step:
		return "failed"
	case cp.Step < st.step || cp.Pending != nil && cp.Pending.Step == st.step:
		if o.kind == handBack {
			return "handed_back"
		}
		return "waiting"
	case cp.NextNode == st.node && !cp.RetryAt.IsZero():
		return graph.StepStatusRetry
	}
	if le, ok := state["_last_error"].(map[string]any); ok && fmt.Sprint(le["step"]) == fmt.Sprint(st.step) {
		return graph.StepStatusError
	}
	return graph.StepStatusOK
}
