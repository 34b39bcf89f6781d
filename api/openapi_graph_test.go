package api_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestOpenAPIGraphSchemasDeclareEveryField: the graph routes' bodies, and
// the graph fields of a record and a tree node, are in the document.
func TestOpenAPIGraphSchemasDeclareEveryField(t *testing.T) {
	t.Parallel()
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Properties map[string]json.RawMessage `json:"properties"`
			} `json:"schemas"`
		} `json:"components"`
	}
	require.NoError(t, json.Unmarshal(api.OpenAPI, &doc))
	now := time.Now()
	rec := &registry.Record{ThreadID: "g/x-1-a", Directive: "g/x", Status: thread.StatusWaiting, Kind: registry.KindGraph, GraphDigest: "d",
		CurrentNode: "n", Step: 2, MaxSteps: 9, SuppressedErrors: 1, ItemsDone: 1, ItemsTotal: 3, StateSHA256: "s", ForkedFrom: "g/x-0-a", ForkTurn: 1,
		Cost: thread.Cost{Steps: 2, Spend: 1}, Limits: thread.DefaultLimits(), CreatedAt: now, UpdatedAt: now,
		PauseRequested: true, PausedMS: 1500}
	row := graph.NodeRow{Index: 1, Node: "n", Kind: "foreach", Status: "running", Visits: 1, LastStep: 2, DurationMS: 3, Action: "tool x",
		Children: "1/3 done", Detail: "d", Routed: true, Retried: true, Run: "g/x-0-a"}
	step := graph.StepRecord{Step: 2, Node: "n", Kind: "foreach", Status: "ok", RoutedBy: "next", Started: now, Ended: now, ThreadIDs: []string{"a"},
		Error: "e", Assigned: []string{"k"}, NextNode: "m", Action: "tool x", Run: "g/x-0-a", ItemsDone: 2, ItemsTotal: 3, ItemsFailed: 1, ItemsCancelled: 1}
	node := &orchestrator.TreeNode{ThreadID: "g/x-1-a", Kind: registry.KindGraph, CurrentNode: "n", Step: 2, ForkedFrom: "g/x-0-a", ForkTurn: 1,
		Children: []*orchestrator.TreeNode{}, Forks: []*orchestrator.TreeNode{}}
	for schema, v := range map[string]any{
		"Record":             rec,
		"Cost":               rec.Cost,
		"TreeNode":           node,
		"GraphRun":           api.GraphRun{Record: rec, Nodes: []graph.NodeRow{row}, Steps: []graph.StepRecord{step}, WakeAt: now},
		"NodeRow":            row,
		"StepRecord":         step,
		"GraphState":         api.GraphState{RunID: "a", Step: 1, State: map[string]any{"k": 1}},
		"GraphRunRequest":    api.GraphRunRequest{Graph: "g", Inputs: map[string]any{"a": 1}, Limits: map[string]any{"max_steps": 3}, Parent: "p", Queue: "q"},
		"GraphResumeRequest": api.GraphResumeRequest{From: "n", Set: map[string]any{"k": 1}},
		"GraphForkRequest":   api.GraphForkRequest{AtStep: 1, From: "n", Set: map[string]any{"k": 1}},
	} {
		props, ok := doc.Components.Schemas[schema]
		require.True(t, ok, "schema %s", schema)
		b, err := json.Marshal(v)
		require.NoError(t, err)
		var fields map[string]any
		require.NoError(t, json.Unmarshal(b, &fields))
		for k := range fields {
			require.Contains(t, props.Properties, k, "schema %s lacks %q", schema, k)
		}
	}
}

// TestGraphRunJSON: a GraphRun reads back what it writes, the record's
// fields at the top level beside nodes and steps.
func TestGraphRunJSON(t *testing.T) {
	t.Parallel()
	rec := &registry.Record{ThreadID: "g/x-1-a", Directive: "g/x", Status: thread.StatusCompleted, Kind: registry.KindGraph, Step: 3,
		Outputs: map[string]any{"ok": true}}
	in := api.GraphRun{Record: rec, Nodes: []graph.NodeRow{{Index: 1, Node: "a", Kind: "gate", Status: "completed", Visits: 1}}}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	var top map[string]any
	require.NoError(t, json.Unmarshal(b, &top))
	require.Equal(t, "graph", top["kind"])
	require.Equal(t, []any{}, top["steps"])
	var out api.GraphRun
	require.NoError(t, json.Unmarshal(b, &out))
	require.Equal(t, rec.ThreadID, out.Record.ThreadID)
	require.Equal(t, 3, out.Record.Step)
	require.Equal(t, in.Nodes, out.Nodes)
	require.NotContains(t, top, "wake_at", "a run that does not sleep has no wake time")

	wake := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	rec.Status, rec.WaitingFor = thread.StatusWaiting, registry.WaitingForSleep
	b, err = json.Marshal(api.GraphRun{Record: rec, WakeAt: wake})
	require.NoError(t, err)
	require.Contains(t, string(b), `"wake_at":"2026-03-01T09:00:00Z"`)
	out = api.GraphRun{}
	require.NoError(t, json.Unmarshal(b, &out))
	require.True(t, wake.Equal(out.WakeAt))
}
