package e2e

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/otlptest"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

// bossFiles: g/boss may start the graph g/review (<execute><graph>) and
// calls rye/agent/graphs/run_graph (scripts/graph.yaml); g/nosy may not.
func bossFiles() map[string]string {
	return map[string]string{
		// A run's capabilities are its graph's within its starter's: the
		// boss holds what g/review's steps do.
		".ai/directives/g/boss.md": graphDirective("boss", `<execute><graph>g/review</graph><tool>rye/file-system/*</tool><directive>g/*</directive></execute>`, ""),
		".ai/directives/g/nosy.md": graphDirective("nosy", fsPerms, ""),
	}
}

// TestGraphFromThread: a thread starts a graph with the built-in tool
// rye/agent/graphs/run_graph, synchronously: the thread suspends while
// the run and the run's own children go on, and gets the run's outputs
// when it ends. Thread, run and the run's children are one tree: one
// trace and one budget (the thread's ledger entry counts every child's
// spend, the run's capabilities are within the thread's). A thread
// without the graph's capability is refused, and the model reads why.
func TestGraphFromThread(t *testing.T) {
	t.Parallel()
	rx := otlptest.NewHTTP(t)
	files := graphProject()
	for k, v := range bossFiles() {
		files[k] = v
	}
	// The run suspends while its children run, so its review step has a
	// span in each activation: waiting, then ok.
	files[".ai/config/agent/graphs.yaml"] = noHold
	e := spooltest.New(t, spooltest.Options{Files: files})
	e.Start([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + rx.URL, "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf", "OTEL_SERVICE_NAME=spool-worker",
		"OTEL_BSP_SCHEDULE_DELAY=100", "OTEL_METRIC_EXPORT_INTERVAL=200"}, "worker", "--concurrency", "4")
	boss, res := runJSON(t, e, "g/boss", "--limit", "spend=0.3")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, boss.Status, "%+v", boss.Error)
	require.Contains(t, boss.Result, "boss saw: ")
	var seen map[string]any
	require.NoError(t, json.Unmarshal([]byte(boss.Result[len("boss saw: "):]), &seen), boss.Result)
	require.Equal(t, "completed", seen["status"])
	require.Equal(t, "g/review", seen["graph"])
	require.Equal(t, map[string]any{"reviewed": 2.0, "failed": 0.0, "planned": 2.0}, seen["outputs"])

	// The tree: boss → run → two reviewers.
	runs, err := e.Orch.Children(t.Context(), boss.ThreadID)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	run := runs[0]
	require.Equal(t, registry.KindGraph, run.Kind)
	require.Equal(t, seen["run_id"], run.ThreadID)
	require.Equal(t, 1, run.Depth)
	kids, err := e.Orch.Children(t.Context(), run.ThreadID)
	require.NoError(t, err)
	require.Len(t, kids, 2)
	for _, k := range kids {
		require.Equal(t, 2, k.Depth)
		require.Equal(t, run.ThreadID, k.ParentID)
	}

	// One trace.
	require.Regexp(t, `^[0-9a-f]{32}$`, boss.TraceID)
	for _, r := range append([]*registry.Record{run}, kids...) {
		require.Equal(t, boss.TraceID, r.TraceID, "%s is in the tree's trace", r.ThreadID)
	}

	// One trace of spans: the run's under the boss's spawn, a span per
	// step (graph, node, step, kind, attempt, status), the children's
	// threads under the step that started them.
	tree := append([]*registry.Record{boss, run}, kids...)
	var spans []otlptest.Span
	threadSpan := map[string]otlptest.Span{}
	require.Eventually(t, func() bool {
		spans = rx.Spans()
		for _, sp := range spans {
			if sp.GetName() == telemetry.SpanThread {
				threadSpan[sp.Attr("spool.thread_id")] = sp
			}
		}
		return len(threadSpan) >= len(tree)
	}, 30*time.Second, 100*time.Millisecond, "the thread spans of boss, run and children")
	byID := map[string]otlptest.Span{}
	var steps []otlptest.Span
	for _, sp := range spans {
		require.Equal(t, boss.TraceID, sp.TraceID(), "span %s of %s", sp.GetName(), sp.Attr("spool.thread_id"))
		byID[sp.ID()] = sp
		if sp.GetName() == telemetry.SpanGraphStep {
			steps = append(steps, sp)
		}
	}
	spawn := byID[threadSpan[run.ThreadID].ParentID()]
	require.Equal(t, telemetry.SpanSpawn, spawn.GetName(), "the run's span is under the boss's spawn")
	require.Equal(t, boss.ThreadID, spawn.Attr("spool.thread_id"))
	status := map[string][]string{}
	for _, sp := range steps {
		require.Equal(t, run.ThreadID, sp.Attr("spool.thread_id"))
		require.Equal(t, "g/review", sp.Attr("spool.graph"))
		require.Positive(t, sp.Int("spool.graph.step"))
		require.Positive(t, sp.Int("spool.graph.attempt"))
		require.NotEmpty(t, sp.Attr("spool.graph.kind"))
		node := sp.Attr("spool.graph.node")
		status[node] = append(status[node], sp.Attr("spool.graph.status"))
		require.Equal(t, telemetry.SpanActivation, byID[sp.ParentID()].GetName(), "a step is in its activation")
	}
	require.Equal(t, []string{"ok"}, status["plan"])
	require.Equal(t, []string{"ok"}, status["done"])
	require.Contains(t, status["review"], "waiting")
	require.Equal(t, "ok", status["review"][len(status["review"])-1])
	for _, k := range kids {
		parent := byID[threadSpan[k.ThreadID].ParentID()]
		require.Equal(t, telemetry.SpanGraphStep, parent.GetName(), "child %s is under its step", k.ThreadID)
		require.Equal(t, "review", parent.Attr("spool.graph.node"))
	}
	require.Eventually(t, func() bool { return rx.Metric("spool_graph_steps_total") && rx.Metric("spool_graph_runs_total") },
		30*time.Second, 100*time.Millisecond, "the graph counters")

	// One budget: the boss's entry holds the whole tree's spend, and the
	// run's ceiling was its share of the boss's.
	entry, err := e.Orch.LedgerEntry(t.Context(), boss.ThreadID)
	require.NoError(t, err)
	spent := boss.Cost.Spend
	for _, k := range kids {
		require.Positive(t, k.Cost.Spend)
		spent += k.Cost.Spend
	}
	require.InDelta(t, spent, entry.Actual, 1e-9, "the boss's budget counts its own turns, the run's and its children's")
	require.LessOrEqual(t, run.Limits.Spend, 0.3)
	budget := e.Spool("budget", "show", boss.ThreadID, "--json")
	require.Equal(t, 0, budget.Code, budget.Stderr)
	var b struct {
		Actual   float64 `json:"actual"`
		Children []struct {
			ThreadID string `json:"thread_id"`
		} `json:"children"`
	}
	budget.JSON(t, &b)
	require.InDelta(t, spent, b.Actual, 1e-9)
	require.Len(t, b.Children, 1)
	require.Equal(t, run.ThreadID, b.Children[0].ThreadID)

	// A thread without the graph's capability: refused, and the model
	// reads why.
	nosy, res := runJSON(t, e, "g/nosy")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Contains(t, nosy.Result, "permission denied: starting graph g/review needs capability rye.execute.graph.g.review")
	none, err := e.Orch.Children(t.Context(), nosy.ThreadID)
	require.NoError(t, err)
	require.Empty(t, none)
}

// TestGraphFromThreadAsync: run_graph with async=true answers the run's
// id at once and the run goes on as the thread's child; a graph the
// project does not have is refused, and the model reads why.
func TestGraphFromThreadAsync(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, map[string]string{
		".ai/directives/g/launcher.md": graphDirective("launcher", `<execute><graph>g/*</graph><tool>rye/file-system/*</tool><directive>g/*</directive></execute>`, ""),
	})
	rec, res := runJSON(t, e, "g/launcher")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Contains(t, rec.Result, `"code":"graph_refused"`, "the second call: no such graph")
	require.Contains(t, rec.Result, "g/nope")
	runs, err := e.Orch.Children(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	run := e.Wait([]string{runs[0].ThreadID}, 2*time.Minute)[runs[0].ThreadID]
	require.Equal(t, registry.KindGraph, run.Kind)
	require.Equal(t, thread.StatusCompleted, run.Status, "%+v", run.Error)
	require.Equal(t, 1.0, run.Outputs["reviewed"])
	events := transcriptEvents(t, e, rec.ThreadID)
	results := eventsOf(events, "tool_call_result")
	require.Len(t, results, 2)
	require.Contains(t, payload(results[0])["output"], `"run_id":"`+run.ThreadID+`"`)
	require.Contains(t, payload(results[0])["output"], `"status":"running"`)
}
