package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

const hooksGraph = `config:
  start: first
  hooks:
    - id: started
      event: graph_started
      action: {tool: rye/file-system/fs_write, params: {path: "hooks/started.txt", content: "${graph}"}}
    - id: stepped
      event: after_step
      action: {tool: rye/file-system/fs_write, params: {path: "hooks/step-${step}.txt", content: "${node}"}}
    - id: failed
      event: error
      condition: {path: error.code, op: eq, value: tool_error}
      action: {tool: rye/file-system/fs_write, params: {path: "hooks/error.txt", content: "${node}: ${error.code}"}}
    - id: done
      event: graph_completed
      action: {tool: rye/file-system/fs_write, params: {path: "hooks/done.txt", content: "${status} after ${steps}"}}
    - id: broken
      event: graph_completed
      action: {tool: rye/file-system/fs_read, params: {path: "hooks/nothing-here.txt"}}
  nodes:
    first:
      action: {tool: rye/file-system/fs_read, params: {path: "missing.txt"}}
      on_error: second
      next: second
    second:
      type: gate
      next: out
    out:
      type: return
      output: {ok: true}
`

// TestGraphHooks: a graph's own hooks observe graph_started, after_step
// (each step), error and graph_completed; each is recorded (hook_fired);
// a failing hook is recorded with its error and never fails the run.
func TestGraphHooks(t *testing.T) {
	t.Parallel()
	files := walkProject("0ms", map[string]string{"g/hooks": hooksGraph})
	// A project hook of a graph event runs after the graph's own.
	files[".ai/config/agent/hooks.yaml"] = `hooks:
  - id: project_done
    event: graph_completed
    action: {primary: execute, item_type: tool, item_id: rye/file-system/fs_write, params: {path: "hooks/project.txt", content: "${status}"}}
`
	e := workerEnv(t, files, "2")
	rec, res := runGraph(t, e, "g/hooks")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status)
	fired := map[string]int{}
	var brokenErr string
	for _, h := range payloads[transcript.HookFired](t, events(t, e, rec.ThreadID), transcript.TypeHookFired) {
		fired[h.HookID+"/"+h.Event]++
		if h.HookID == "broken" {
			brokenErr = h.Error
		}
	}
	require.Equal(t, map[string]int{"started/graph_started": 1, "stepped/after_step": 3, "failed/error": 1,
		"done/graph_completed": 1, "broken/graph_completed": 1, "project_done/graph_completed": 1}, fired)
	require.NotEmpty(t, brokenErr, "the failing hook is recorded with its error")
	for path, want := range map[string]string{"hooks/started.txt": "g/hooks", "hooks/step-1.txt": "first", "hooks/step-3.txt": "out",
		"hooks/error.txt": "first: tool_error", "hooks/done.txt": "completed after 3", "hooks/project.txt": "completed"} {
		b, err := e.Store.Get(t.Context(), blobkey.WorkspaceFile(rec.ThreadID, path))
		if err != nil {
			res := e.Spool("thread", "transcript", rec.ThreadID, "--format", "jsonl")
			t.Fatalf("%s: %v\n%s", path, err, res.Stdout)
		}
		require.Equal(t, want, string(b), path)
	}
}

// The reference's form and placement: a graph among the tools
// (tool_type: graph), config_schema, node_type, primary/item_id actions,
// thread_directive items, and a nested graph named as a tool.
const refPipeline = `version: "1.0.0"
tool_type: graph
executor_id: rye/core/runtimes/state-graph/runtime
category: graphs
description: "Write a plan, run an item per topic, then run the summary graph"
permissions:
  - rye.execute.tool.rye.file-system.*
  - rye.execute.tool.rye.agent.threads.thread_directive
  - rye.execute.tool.graphs.*
config_schema:
  type: object
  properties:
    topics: {type: array, items: {type: string}}
  required: [topics]
config:
  start: plan
  max_steps: 10
  nodes:
    plan:
      node_type: action
      action:
        primary: execute
        item_id: tool:rye/file-system/fs_write
        params: {path: plan.txt, content: "${state.inputs.topics | length} topics"}
      next: each
    each:
      node_type: foreach
      over: "${state.inputs.topics}"
      as: topic
      action:
        primary: execute
        item_id: tool:rye/agent/threads/thread_directive
        params:
          directive_id: g/item
          inputs: {n: "${topic}"}
          limit_overrides: {turns: 4}
      collect: items
      next: summary
    summary:
      action:
        primary: execute
        item_id: tool:graphs/summary
        params: {count: "${state.items | length}"}
      assign: {summary: "${result.outputs.line}"}
      next: done
    done:
      node_type: return
      output: {summary: "${state.summary}"}
`

const refSummary = `version: "1.0.0"
tool_type: graph
description: "Say how many items there were"
permissions:
  - rye.execute.tool.rye.file-system.*
config_schema:
  type: object
  properties:
    count: {type: integer}
config:
  start: say
  nodes:
    say:
      node_type: return
      output: {line: "${inputs.count} items summarized"}
`

// TestGraphReferenceForm runs graphs written as the reference writes
// them, where it keeps them: under .ai/tools, nested by item_id.
func TestGraphReferenceForm(t *testing.T) {
	t.Parallel()
	files := walkProject("0ms", nil)
	files[".ai/tools/graphs/pipeline.yaml"] = refPipeline
	files[".ai/tools/graphs/summary.yaml"] = refSummary
	e := workerEnv(t, files, "4")
	res := e.Spool("graph", "validate", ".ai/tools/graphs/pipeline.yaml", "graphs/summary")
	require.Equal(t, 0, res.Code, res.Stdout+res.Stderr)
	rec, res := runGraph(t, e, "graphs/pipeline", "--inputs-json", `{"topics": ["x", "y"]}`)
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, map[string]any{"summary": "2 items summarized"}, rec.Outputs)
	kids := children(t, e, rec.ThreadID)
	require.Len(t, kids, 3, "two items and the nested graph")
	var nested *registry.Record
	for _, k := range kids {
		if k.Kind == registry.KindGraph {
			nested = k
		}
	}
	require.NotNil(t, nested, "the nested graph ran as a child run")
	require.Equal(t, "graphs/summary", nested.Directive)
	require.Equal(t, thread.StatusCompleted, nested.Status)
}

const slowRetryGraph = `config:
  start: flaky
  nodes:
    flaky:
      action: {tool: rye/file-system/fs_read, params: {path: "later.txt"}}
      retry: {attempts: 3, backoff: 3s}
      next: done
    done:
      type: return
      output: {read: "${state.read}"}
`

// TestGraphRetryHandsBack: a retry whose backoff is longer than a slot
// should be held hands the run back (waiting, no activation) until then.
func TestGraphRetryHandsBack(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, walkProject("0ms", map[string]string{"g/slow": slowRetryGraph}), "2")
	res := e.Spool("graph", "run", "g/slow", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var rec registry.Record
	res.JSON(t, &rec)
	w := waitStatus(t, e, rec.ThreadID, thread.StatusWaiting)
	require.Equal(t, registry.WaitingForRetry, w.WaitingFor)
	final := e.Wait([]string{rec.ThreadID}, 2*time.Minute)[rec.ThreadID]
	require.Equal(t, thread.StatusError, final.Status)
	require.Equal(t, "node_error", final.Error.Code)
	var retries []transcript.StepCompleted
	for _, sc := range stepEvents(t, e, rec.ThreadID) {
		if sc.Status == "retry" {
			retries = append(retries, sc)
		}
	}
	require.Len(t, retries, 2, "attempts: 3 is two retries")
	require.Equal(t, 3, final.Step)
	require.GreaterOrEqual(t, final.Activation, int64(3), "each backoff was waited out without the slot")
}

const durationGraph = `limits: {duration: 2}
config:
  start: fan
  nodes:
    fan:
      type: foreach
      over: '["a", "b"]'
      parallel: true
      action: {directive: g/item, inputs: {n: "${item}"}}
      next: done
    done:
      type: return
`

// TestGraphDurationLimit: a run past its duration ends in
// duration_seconds_exceeded, and its running children are cancelled.
func TestGraphDurationLimit(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: walkProject("3s", map[string]string{"g/slowfan": durationGraph})})
	e.StartWorker("--concurrency", "4")
	rec, res := runGraph(t, e, "g/slowfan")
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Equal(t, thread.CodeDurationExceeded, rec.Error.Code)
	for _, k := range children(t, e, rec.ThreadID) {
		k = waitStatus(t, e, k.ThreadID, thread.StatusCancelled, thread.StatusError, thread.StatusCompleted)
		require.NotEqual(t, thread.StatusCompleted, k.Status, "a child of the expired run ran on: %s", k.ThreadID)
	}
}
