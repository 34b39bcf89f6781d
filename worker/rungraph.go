package worker

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// runGraphID is the built-in tool that starts a graph run from a thread
// (spec: state graphs, starting graphs from a thread): the run is a child
// of the thread, in its tree, trace and budget. Its capability is the
// graph's, rye.execute.graph.<dotted name>, not the tool's: a thread may
// start the graphs its directive names. A sync call becomes a pending
// call, as a sync spawn does: the thread suspends at the end of the turn,
// holding no slot, and the run's summary (run_id, status, outputs, ...)
// is the call's result when it wakes.
const runGraphID = "rye/agent/graphs/run_graph"

// runGraphDef is the tool as the model sees it.
var runGraphDef = thread.ToolDef{Name: runGraphID,
	Description: "Start a graph run: the graph .ai/graphs/GRAPH.yaml, a fixed order of tool steps and child threads. Synchronous by default: the call returns the run's outputs when it ends. With async=true it returns the run's id at once.",
	InputSchema: inputSchema[runGraphParams](nil)}

// runGraphParams are the tool's parameters, its schema made from them.
type runGraphParams struct {
	Graph  string          `json:"graph"`
	Inputs json.RawMessage `json:"inputs,omitempty"`
	Async  bool            `json:"async,omitempty"`
	// LimitOverrides are the run's limits: a thread's and max_steps.
	LimitOverrides map[string]any `json:"limit_overrides,omitempty"`
	Reserve        bool           `json:"reserve,omitempty"`
}

// graphOf reads the graph a run_graph call names, as the capability
// check needs it ("" when the input does not say).
func graphOf(input json.RawMessage) string {
	var p runGraphParams
	if json.Unmarshal(input, &p) != nil {
		return ""
	}
	name, err := orchestrator.GraphName(p.Graph)
	if err != nil {
		return ""
	}
	return name
}

// checkGraphCall is the permission check of a run_graph call: the
// thread of rec must hold the graph's execute capability.
func checkGraphCall(rec *registry.Record, input json.RawMessage) error {
	name := graphOf(input)
	if name == "" {
		return nil // the call itself says what is wrong (runGraph)
	}
	need := (&graph.Action{Graph: name}).Capability()
	if !thread.Match(rec.Capabilities, need) {
		return fmt.Errorf("permission denied: starting graph %s needs capability %s, which this thread does not hold%s", name, need, droppedNote(rec.DroppedCapabilities, need))
	}
	return nil
}

// holdsGraphCapability reports whether caps may start some graph: the
// tool is offered only then.
func holdsGraphCapability(caps []string) bool {
	for _, c := range caps {
		if c == "*" || c == "rye.*" || c == "rye.execute.*" || strings.HasPrefix(c, "rye.execute.graph.") || c == "rye.execute.graph" {
			return true
		}
	}
	return false
}

// runGraphRequest is the start a run_graph call's input asks for (its
// parent and planned id still to set), and whether it runs async; or
// what is wrong with the input, as the call's result tells the model.
func runGraphRequest(input json.RawMessage) (_ orchestrator.StartRequest, async bool, problem string) {
	var p runGraphParams
	if err := json.Unmarshal(input, &p); err != nil {
		return orchestrator.StartRequest{}, false, "bad run_graph parameters: " + err.Error()
	}
	if strings.TrimSpace(p.Graph) == "" {
		return orchestrator.StartRequest{}, false, "run_graph needs graph: the name of a graph in .ai/graphs, e.g. review/pr"
	}
	name, err := orchestrator.GraphName(p.Graph)
	if err != nil {
		return orchestrator.StartRequest{}, false, err.Error()
	}
	inputs, err := decodeInputs(p.Inputs)
	if err != nil {
		return orchestrator.StartRequest{}, false, err.Error()
	}
	overrides, maxSteps, problem := runGraphLimits(p.LimitOverrides)
	if problem != "" {
		return orchestrator.StartRequest{}, false, problem
	}
	return orchestrator.StartRequest{Graph: true, Directive: name, Inputs: inputs, LimitOverrides: overrides,
		MaxSteps: maxSteps, Reserve: p.Reserve}, p.Async, ""
}

// runGraphLimits are a run_graph call's limit_overrides: a thread's
// limits, and the run's max_steps (0: the graph's); or what is wrong
// with them.
func runGraphLimits(in map[string]any) (_ thread.Limits, maxSteps int, problem string) {
	limits := map[string]any{}
	for k, v := range in {
		if k != "max_steps" {
			limits[k] = v
			continue
		}
		f, err := thread.Number(v)
		if err != nil || f < 1 || f > graph.MaxStepsCap || f != float64(int(f)) {
			return thread.Limits{}, 0, fmt.Sprintf("limit_overrides: max_steps %v: want a whole number from 1 to %d", v, graph.MaxStepsCap)
		}
		maxSteps = int(f)
	}
	overrides, err := thread.LimitsFromMap(limits)
	if err != nil {
		return thread.Limits{}, 0, "limit_overrides: " + err.Error()
	}
	return overrides, maxSteps, ""
}
