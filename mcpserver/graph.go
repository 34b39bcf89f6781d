package mcpserver

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// Graph runs: run_graph starts one (a graph of the project's
// .ai/graphs), show_graph shows its record with its node table; a run is
// a registry record, so wait_thread, cancel_thread, pause_thread,
// unpause_thread, approve_call, deny_call and read_transcript take run
// ids too.

// addGraphTools adds run_graph, show_graph and send_graph_message to s.
func addGraphTools(s *mcp.Server, h *handlers) {
	mcp.AddTool(s, &mcp.Tool{Name: "run_graph", Description: "Start a graph run: the graph .ai/graphs/GRAPH.yaml of the project, " +
		"whose nodes run tools and start child threads in a fixed order. Returns its record (thread_id is the run's id, kind graph); " +
		"with wait=true, the final record once the run has ended (outputs: its return node's output)."}, h.runGraph)
	mcp.AddTool(s, &mcp.Tool{Name: "show_graph", Description: "A graph run's record with its node table (nodes: node, kind, status, " +
		"visits, children, detail) and the steps it took. wait_thread, cancel_thread, pause_thread and unpause_thread take run ids too."}, h.showGraph)
	mcp.AddTool(s, &mcp.Tool{Name: "send_graph_message", Description: "Send a graph run a message, which a wait_message node of its " +
		"name takes (one a visit, oldest first; a run that waits for it is woken). The name must be one the graph waits for and data must " +
		"meet the node's schema; a message whose id the run was sent before is kept once (duplicate: true). A run that has ended takes none " +
		"(run_ended)."}, h.sendGraphMessage)
}

// GraphMessageInput is send_graph_message's input.
type GraphMessageInput struct {
	ThreadID string `json:"thread_id" jsonschema:"the run's id (run_graph's thread_id)"`
	Name     string `json:"name" jsonschema:"the message's name: a wait_message node of the run's graph that takes it"`
	Data     any    `json:"data,omitempty" jsonschema:"the message's data (any JSON), checked against the node's schema"`
	ID       string `json:"id,omitempty" jsonschema:"makes the send idempotent: the run keeps one message of each id"`
	By       string `json:"by,omitempty" jsonschema:"who sends it (default: the MCP client's name)"`
}

func (h *handlers) sendGraphMessage(ctx context.Context, req *mcp.CallToolRequest, in GraphMessageInput) (*mcp.CallToolResult, any, error) {
	if in.Name == "" {
		return nil, nil, errors.New("name is required: the message name a wait_message node takes")
	}
	rec, err := h.record(ctx, in.ThreadID)
	if err != nil {
		return nil, nil, err
	}
	if !rec.IsGraph() {
		return nil, nil, fmt.Errorf("%s is a thread, not a graph run (messages go to graph runs)", rec.ThreadID)
	}
	data, err := json.Marshal(in.Data)
	if err != nil {
		return nil, nil, err
	}
	res, err := h.cfg.Orch.SendGraphMessage(ctx, in.ThreadID, orchestrator.GraphMessage{Name: in.Name, Data: data, ID: in.ID, By: who(req, in.By)})
	if err != nil {
		return nil, nil, err
	}
	return nil, res, nil
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
	return nil, spooltype.GraphRun{Record: rec, Nodes: v.Nodes, Steps: v.Steps, WakeAt: v.WakeAt, MessageName: v.MessageName}, nil
}
