package worker

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"time"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// graphHooks runs a graph run's hooks (spec section 12): the graph's own,
// then the project's and the user's (hooks.yaml). Hooks are observers,
// run at least once; a failing hook is recorded (hook_fired with its
// error) and never fails the run. Their actions run with the run's
// capabilities; a directive or graph action starts an async child of the
// run, planned from the event, the step and the hook, so a hook run again
// adopts it. It reads the run's cursor and state where the run keeps
// them; the zero graphHooks (a run whose graph did not load) runs none.
type graphHooks struct {
	g       *graph.Graph
	proj    *orchestrator.Project
	rec     *registry.Record
	actions *graphActions
	emit    func(typ string, payload any)
	log     *slog.Logger
	cp      *graphCheckpoint
	state   *map[string]any
}

// hookLayerGraph is the layer of a graph's own hooks in hook_fired.
const hookLayerGraph = 1

// fire runs the hooks of event whose condition evctx meets.
func (h graphHooks) fire(ctx context.Context, event string, evctx map[string]any) {
	if h.g == nil {
		return
	}
	for _, gh := range h.g.Hooks {
		if gh.Event != event {
			continue
		}
		if ok, err := gh.Condition.Eval(evctx); err != nil || !ok {
			continue
		}
		scope := h.scope(evctx)
		scope[graph.ScopeRun] = graph.RunScope{ID: h.rec.ThreadID, Graph: h.g.Name, GraphDigest: h.rec.GraphDigest, ParentID: h.rec.ParentID,
			Step: h.cp.Step, StartedAt: h.cp.At}.Map()
		a, err := h.actions.resolve(&gh.Action, scope)
		ev := transcript.HookFired{HookID: gh.ID, Event: event, Layer: hookLayerGraph, Action: "execute"}
		if err == nil {
			ev.ItemType, ev.ItemID = a.Kind(), a.ID()
			err = h.action(ctx, gh.ID, event, a, scope)
		}
		if err != nil {
			ev.Error = err.Error()
			h.log.Warn("graph hook failed", "hook", gh.ID, "event", event, "error", err)
		}
		h.emit(transcript.TypeHookFired, ev)
	}
	h.project(ctx, event, evctx, h.scope(evctx))
}

// scope is evctx with the run's state and inputs, which a hook's action
// reads.
func (h graphHooks) scope(evctx map[string]any) map[string]any {
	scope := maps.Clone(evctx)
	scope[graph.ScopeState], scope[graph.ScopeInputs] = *h.state, h.rec.Inputs
	return scope
}

// project runs the project's and the user's hooks (hooks.yaml) of a
// graph event, after the graph's own (spec: graph hooks): their execute
// actions of a tool, directive or graph, with the run's capabilities, as
// the graph's own hooks' actions run.
func (h graphHooks) project(ctx context.Context, event string, evctx, scope map[string]any) {
	for _, ph := range hooks.Merge(h.proj.UserHooks, nil, nil, h.proj.ProjectHooks, nil) {
		if ph.Event != event || ph.Action.Primary != hooks.PrimaryExecute {
			continue
		}
		if ok, err := ph.Condition.Eval(evctx); err != nil || !ok {
			continue
		}
		a := &graph.Action{}
		switch ph.Action.ItemType {
		case "tool":
			a.Tool, a.Params = normalizeTool(ph.Action.ItemID), ph.Action.Params
		case "directive":
			a.Directive, a.Inputs = ph.Action.ItemID, ph.Action.Params
		case "graph":
			a.Graph, a.Inputs = ph.Action.ItemID, ph.Action.Params
		default:
			continue
		}
		ev := transcript.HookFired{HookID: ph.ID, Event: event, Layer: ph.Layer, Action: ph.Action.Primary, ItemType: ph.Action.ItemType, ItemID: ph.Action.ItemID}
		if err := h.action(ctx, ph.ID, event, a, scope); err != nil {
			ev.Error = err.Error()
			h.log.Warn("project hook failed", "hook", ph.ID, "event", event, "error", err)
		}
		h.emit(transcript.TypeHookFired, ev)
	}
}

// action runs a hook's action: a tool in the activation, a directive or
// a graph as an async child whose id is planned from the hook.
func (h graphHooks) action(ctx context.Context, hookID, event string, a *graph.Action, scope map[string]any) error {
	if a.Tool != "" {
		s := &stepRun{n: &graph.Node{Name: "hook:" + hookID}, began: time.Now()}
		_, se, err := h.actions.run(ctx, s, a, scope, "hook-"+hookID+"-"+event)
		if err != nil {
			return err
		}
		if se != nil {
			return se
		}
		return nil
	}
	if !graph.Permitted(h.rec.Capabilities, a) {
		return fmt.Errorf("%s needs capability %s, which this run does not hold", a.ID(), a.Capability())
	}
	inputs, err := graph.Params(a.Inputs, scope)
	if err != nil {
		return err
	}
	seed := fmt.Sprintf("hook/%s/%s/step/%d", hookID, event, h.cp.Step)
	_, err = h.actions.start(ctx, a, inputs, seed)
	return err
}
