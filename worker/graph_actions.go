package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// graphActions are what a graph run's steps and hooks act with: an
// action resolved against the project's tools and graphs, a tool run in
// the activation under the run's capabilities (with its tool_call
// events), a child started under the id planned for it. It holds the
// run's record, its project, its tools and their environment.
type graphActions struct {
	o     *orchestrator.Runtime
	proj  *orchestrator.Project
	tools *tools.Registry
	env   *tools.Env
	// rec is the run's record.
	rec *registry.Record
	// emit appends an event to the run's transcript.
	emit func(typ string, payload any)
}

// resolve interpolates an action's ids and turns a reference
// tool action that names a graph (item_id "tool:graphs/x") into a graph
// action.
func (x *graphActions) resolve(a *graph.Action, scope map[string]any) (*graph.Action, error) {
	c := *a
	for _, f := range []*string{&c.Tool, &c.Directive, &c.Graph} {
		if strings.Contains(*f, "${") {
			v, err := graph.String(*f, scope)
			if err != nil {
				return nil, err
			}
			*f = v
		}
	}
	if c.Tool != "" {
		if _, ok := x.tools.Lookup(c.Tool); !ok && !isOrchestrationTool(c.Tool) {
			if _, err := x.proj.Graph(c.Tool); err == nil {
				return c.AsGraph(), nil
			}
		}
	}
	return &c, nil
}

// run runs a tool action in the activation: permission, params,
// timeout, the tool_call events. serr is the step's failure; err an
// infrastructure failure (the activation runs again).
func (x *graphActions) run(ctx context.Context, s *stepRun, a *graph.Action, scope map[string]any, callID string) (any, *graph.StepError, error) {
	id := a.Tool
	if !graph.Permitted(x.rec.Capabilities, a) {
		return nil, stepErr(graph.CodePermissionDenied, "calling %s needs capability %s, which this run does not hold", id, a.Capability()), nil
	}
	params, err := graph.Params(a.Params, scope)
	if err != nil {
		return nil, asStepError(err), nil
	}
	input, err := json.Marshal(params)
	if err != nil {
		return nil, stepErr(graph.CodeToolError, "params of %s: %v", id, err), nil
	}
	x.emit(transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: callID, Tool: id, Input: input})
	tool, ok := x.tools.Lookup(id)
	if !ok {
		x.emit(transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: callID, Tool: id, Output: "unknown tool " + id, IsError: true})
		return nil, stepErr(graph.CodeToolError, "unknown tool %s", id), nil
	}
	timeout := a.Timeout
	if timeout == 0 {
		timeout = s.n.Timeout
	}
	tctx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		tctx, cancel = context.WithTimeoutCause(ctx, timeout, errStepTimeout)
	}
	res, err := tool.Run(tctx, x.env, input)
	timedOut := errors.Is(context.Cause(tctx), errStepTimeout)
	cancel()
	switch {
	case err != nil && stopRequested(ctx):
		x.emit(transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: callID, Tool: id, Output: stoppedWhile(ctx), IsError: true})
		return nil, nil, context.Cause(ctx)
	case timedOut:
		x.emit(transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: callID, Tool: id, Output: "timed out", IsError: true})
		return nil, stepErr(graph.CodeTimeout, "tool %s did not finish within %s", id, timeout), nil
	case err != nil:
		return nil, nil, fmt.Errorf("tool %s: %w", id, err)
	}
	out := res.Output
	shown := out
	if n := x.proj.Graphs.MaxEventResultBytes; len(shown) > n {
		shown = shown[:n]
	}
	x.emit(transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: callID, Tool: id, Output: shown, IsError: res.IsError})
	if res.IsError {
		return nil, stepErr(graph.CodeToolError, "tool %s: %s", id, strings.TrimSpace(out)), nil
	}
	return toolValue(out), nil, nil
}

// start starts (or adopts) the child of action a planned by seed.
func (x *graphActions) start(ctx context.Context, a *graph.Action, inputs map[string]any, seed string) (*registry.Record, error) {
	req, err := x.request(a, inputs, seed)
	if err != nil {
		return nil, err
	}
	return x.o.Start(ctx, req)
}

// request is the start of action a's child planned by seed.
func (x *graphActions) request(a *graph.Action, inputs map[string]any, seed string) (orchestrator.StartRequest, error) {
	limits := map[string]any{}
	maxSteps := 0
	for k, v := range a.Limits {
		if k == "max_steps" {
			f, err := thread.Number(v)
			if err != nil || f < 1 {
				return orchestrator.StartRequest{}, fmt.Errorf("limits.max_steps %v: want a positive whole number", v)
			}
			maxSteps = int(f)
			continue
		}
		limits[k] = v
	}
	overrides, err := thread.LimitsFromMap(limits)
	if err != nil {
		return orchestrator.StartRequest{}, fmt.Errorf("limits: %w", err)
	}
	name := a.Directive
	if a.Graph != "" {
		name = a.Graph
	}
	// Planned at the run's registration time, which a failover that loses
	// a claim (and its started_at) cannot change: a rerun plans the same id.
	id := x.o.PlannedID(orchestrator.IDRequest{Directive: name, ParentID: x.rec.ThreadID}, x.rec.CreatedAt, seed)
	return orchestrator.StartRequest{Directive: name, Graph: a.Graph != "", Inputs: inputs, Model: a.Model, LimitOverrides: overrides,
		MaxSteps: maxSteps, ParentID: x.rec.ThreadID, Reserve: a.Reserve, ID: id, Planned: true}, nil
}

// has reports whether the run's tools have id.
func (x *graphActions) has(id string) bool {
	_, ok := x.tools.Lookup(id)
	return ok
}
