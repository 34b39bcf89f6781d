package mcpserver

import (
	"context"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// Graph runs: run_graph starts one (a graph of the project's
// .ai/graphs), show_graph shows its record with its node table; a run is
// a registry record, so wait_thread, cancel_thread, approve_call,
// deny_call and read_transcript take run ids too.

// addGraphTools adds run_graph and show_graph to s.
func addGraphTools(s *mcp.Server, h *handlers) {
	mcp.AddTool(s, &mcp.Tool{Name: "run_graph", Description: "Start a graph run: the graph .ai/graphs/GRAPH.yaml of the project, " +
		"whose nodes run tools and start child threads in a fixed order. Returns its record (thread_id is the run's id, kind graph); " +
		"with wait=true, the final record once the run has ended (outputs: its return node's output)."}, h.runGraph)
	mcp.AddTool(s, &mcp.Tool{Name: "show_graph", Description: "A graph run's record with its node table (nodes: node, kind, status, " +
		"visits, children, detail) and the steps it took. wait_thread and cancel_thread take run ids too."}, h.showGraph)
}

// RunGraphInput is run_graph's input.
type RunGraphInput struct {
	Graph  string         `json:"graph" jsonschema:"the graph to run, e.g. demo/review (.ai/graphs/demo/review.yaml)"`
	Inputs map[string]any `json:"inputs,omitempty" jsonschema:"the graph's inputs, checked against its inputs schema"`
	Wait   bool           `json:"wait,omitempty" jsonschema:"wait until the run has ended and return its final record"`
	Admission
}

// GraphInput names a graph run.
type GraphInput struct {
	ThreadID string `json:"thread_id" jsonschema:"the run's id (run_graph's thread_id)"`
}

func (h *handlers) runGraph(ctx context.Context, _ *mcp.CallToolRequest, in RunGraphInput) (*mcp.CallToolResult, any, error) {
	if in.Graph == "" {
		return nil, nil, errors.New("graph is required")
	}
	name, err := orchestrator.GraphName(in.Graph)
	if err != nil {
		return nil, nil, err
	}
	if in.Inputs == nil {
		in.Inputs = map[string]any{}
	}
	req := orchestrator.StartRequest{Graph: true, Directive: name, Inputs: in.Inputs}
	in.apply(&req)
	started, err := launch.Start(ctx, h.cfg.Orch, launch.Request{Project: h.cfg.Project, UserDir: h.cfg.UserDir, Logger: h.cfg.Logger,
		Scope: h.cfg.Tenant, StartRequest: req})
	if err != nil {
		return nil, nil, err
	}
	rec := started.Record
	h.cfg.Logger.Info("mcp: graph run started", "thread_id", rec.ThreadID, "graph", name)
	if !in.Wait {
		return nil, rec, nil
	}
	return h.waitFor(ctx, rec.ThreadID, 0)
}

func (h *handlers) showGraph(ctx context.Context, _ *mcp.CallToolRequest, in GraphInput) (*mcp.CallToolResult, any, error) {
	rec, err := h.record(ctx, in.ThreadID)
	if err != nil {
		return nil, nil, err
	}
	if !rec.IsGraph() {
		return nil, nil, fmt.Errorf("%s is a thread, not a graph run (show_thread shows it)", rec.ThreadID)
	}
	if !rec.Status.Terminal() {
		if spend, err := h.cfg.Orch.SubtreeSpend(ctx, rec); err == nil {
			rec.Cost.Spend = spend
		}
	}
	v, err := h.cfg.Orch.GraphView(ctx, rec)
	if err != nil {
		return nil, nil, err
	}
	return nil, spooltype.GraphRun{Record: rec, Nodes: v.Nodes, Steps: v.Steps, WakeAt: v.WakeAt}, nil
}
