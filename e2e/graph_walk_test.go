package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// The graph walker end to end: every node kind and rule, on the real
// binary, worker processes and real Redis, and the crash-exactness of
// the stepping protocol under SIGKILL at each of its points.

// walkScript plays g/item: two turns (a file, then directive_return),
// each with latency; an item named "bad" or "bad-again" runs out of
// script and ends in error. One item costs itemSpend.
func walkScript(latency string) string {
	return fmt.Sprintf(`context_window: 200000
price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
latency: %s
directives:
  "g/item":
    - tool_calls:
        - tool: rye/file-system/fs_write
          input: {path: "items/{{.inputs.n}}.txt", content: "item {{.inputs.n}}"}
      when: '{{and (ne .inputs.n "bad") (ne .inputs.n "bad-again")}}'
      usage: {input: 100, output: 10}
    - tool_calls:
        - tool: rye/agent/threads/directive_return
          input: {value: "item {{.inputs.n}}"}
      when: '{{and (ne .inputs.n "bad") (ne .inputs.n "bad-again")}}'
      usage: {input: 100, output: 10}
`, latency)
}

// itemSpend is what one g/item child costs: 200 input and 20 output
// tokens at $1 and $5 per million.
const itemSpend = 200*1.0/1e6 + 20*5.0/1e6

const walkPerms = `permissions:
  - rye.execute.tool.rye.file-system.*
  - rye.execute.directive.g.*
`

// walkProject is a project with g/item, its script and the graphs given
// (name → YAML after the permissions).
func walkProject(latency string, graphs map[string]string) map[string]string {
	files := map[string]string{
		".ai/directives/g/item.md": "# item\n\n```xml\n<directive name=\"item\" version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n" +
			"    <model tier=\"fast\" />\n    <limits turns=\"4\" spend=\"0.5\" />\n    <permissions>" + fsPerms + "</permissions>\n  </metadata>\n" +
			"  <inputs><input name=\"n\" type=\"string\" required=\"true\">item</input></inputs>\n" +
			"  <outputs><output name=\"value\" required=\"true\">value</output></outputs>\n</directive>\n```\n",
		".ai/config/agent/models.yaml": "tiers:\n  fast: script:scripts/g.yaml\n",
		"scripts/g.yaml":               walkScript(latency),
	}
	for name, body := range graphs {
		files[".ai/graphs/"+name+".yaml"] = "version: \"1\"\ndescription: test graph " + name + "\n" + walkPerms + body
	}
	return files
}

// runGraph runs `spool graph run ... --wait --json` and decodes the record.
func runGraph(t *testing.T, e *spooltest.Env, args ...string) (*registry.Record, spooltest.Result) {
	t.Helper()
	res := e.SpoolContext(context.Background(), nil, append([]string{"graph", "run"}, append(args, "--wait", "--json", "--timeout", "3m")...)...)
	var rec registry.Record
	if res.Code == 0 || res.Code == 1 {
		res.JSON(t, &rec)
	}
	return &rec, res
}

// shownGraph is `graph show RUN --json`: the record and the node table.
type shownGraph struct {
	Record registry.Record
	Nodes  []struct {
		Node, Kind, Status string
		Visits             int
	} `json:"nodes"`
}

func showGraph(t *testing.T, e *spooltest.Env, id string) shownGraph {
	t.Helper()
	res := e.Spool("graph", "show", id, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var s shownGraph
	res.JSON(t, &s)
	res.JSON(t, &s.Record)
	return s
}

// nodeStatus is node's status in s.
func nodeStatus(s shownGraph, node string) string {
	for _, n := range s.Nodes {
		if n.Node == node {
			return n.Status
		}
	}
	return "missing"
}

// stepEvents are the step_completed events of run id.
func stepEvents(t *testing.T, e *spooltest.Env, id string) []transcript.StepCompleted {
	t.Helper()
	return payloads[transcript.StepCompleted](t, events(t, e, id), transcript.TypeStepCompleted)
}

// checkRunExact asserts the invariants of a finished run: every step
// completed once in its verified transcript, children started once each
// (no twins: the registry's children are the transcript's planned ones),
// and the ledger's subtree spend equal to what the children recorded.
func checkRunExact(t *testing.T, e *spooltest.Env, rec *registry.Record, wantChildren int) {
	t.Helper()
	res := e.Spool("thread", "verify", rec.ThreadID)
	require.Equal(t, 0, res.Code, res.Stdout+res.Stderr)
	seen := map[int]int{}
	for _, sc := range stepEvents(t, e, rec.ThreadID) {
		seen[sc.Step]++
	}
	for step, n := range seen {
		require.Equal(t, 1, n, "step %d of %s completed %d times", step, rec.ThreadID, n)
	}
	kids := children(t, e, rec.ThreadID)
	require.Len(t, kids, wantChildren, "children of %s: %v", rec.ThreadID, threadIDs(kids))
	planned := map[string]bool{}
	evs := events(t, e, rec.ThreadID)
	for _, ev := range payloads[transcript.StepStarted](t, evs, transcript.TypeStepStarted) {
		for _, id := range ev.Children {
			planned[id] = true
		}
	}
	spawned := map[string]bool{}
	for _, ev := range payloads[transcript.ChildSpawned](t, evs, transcript.TypeChildSpawned) {
		spawned[ev.ChildID] = true
		if ev.Async {
			planned[ev.ChildID] = true // an async child's step plans and starts it in one go
		}
	}
	var spend float64
	for _, k := range kids {
		spend += k.Cost.Spend
		require.True(t, planned[k.ThreadID], "child %s was not planned", k.ThreadID)
		require.True(t, spawned[k.ThreadID], "the start of child %s is in the transcript (child_spawned)", k.ThreadID)
		require.Equal(t, thread.StatusCompleted, k.Status, k.ThreadID)
	}
	entry, err := e.Orch.LedgerEntry(t.Context(), rec.LedgerID())
	require.NoError(t, err)
	require.InDelta(t, spend, entry.Actual, 1e-9, "the ledger holds what the children recorded, once")
	require.InDelta(t, spend, rec.Cost.Spend, 1e-9, "the run's record says its subtree's spend")
}

const kindsGraph = `limits: {spend: 1.0, max_steps: 30, spawns: 30}
inputs:
  type: object
  properties:
    items: {type: array, items: {type: string}, default: [a, b, c]}
config:
  start: begin
  state: {five: [1, 2, 3, 4, 5]}
  nodes:
    begin:
      type: gate
      assign: {count: "${inputs.items | length}"}
      next: write
    write:
      action: {tool: rye/file-system/fs_write, params: {path: "g/count.txt", content: "count ${state.count}"}}
      assign: {wrote: "${result.text}"}
      next: read
    read:
      action: {tool: rye/file-system/fs_read, params: {path: "g/count.txt"}}
      assign: {read: "${result.text}"}
      next: solo
    solo:
      action: {directive: g/item, inputs: {n: solo}}
      assign: {solo: "${result.outputs.value}"}
      next: seq
    seq:
      type: foreach
      over: "${inputs.items}"
      as: x
      action: {directive: g/item, inputs: {n: "seq-${x}"}}
      collect: seq_results
      next: par
    par:
      type: foreach
      over: "${state.five}"
      parallel: true
      max_concurrency: 2
      action: {directive: g/item, inputs: {n: "par-${loop.index}"}}
      collect: par_results
      next: fan_a
    fan_a:
      action: {directive: g/item, inputs: {n: fan-a}, async: true}
      assign: {a: "${result.thread_id}"}
      next: fan_b
    fan_b:
      action: {directive: g/item, inputs: {n: fan-b}, async: true}
      assign: {ids: ["${state.a}", "${result.thread_id}"]}
      next: join
    join:
      type: wait
      threads: "${state.ids}"
      collect: joined
      next:
        - when: {path: result.succeeded, op: eq, value: 2}
          to: done
        - to: never
    never:
      type: return
      output: {ok: false}
    done:
      type: return
      output:
        ok: true
        solo: "${state.solo}"
        read: "${state.read}"
        seq: "${state.seq_results | length}"
        second: "${state.seq_results.1.outputs.value}"
        par: "${state.par_results | length}"
        joined: "${state.joined | length}"
`

// noHold is a graphs.yaml whose runs suspend as soon as their children
// all run (hold_seconds 0): the path a run whose children take longer
// than the hold takes, in tests whose children are quick.
const noHold = "graph:\n  hold_seconds: 0\n"

// holdModes are a run's two ways of waiting for its children: held in
// its activation (the default), and suspended at once (noHold).
var holdModes = map[string]string{"held": "", "suspended": noHold}

// withHold is files with graphs.yaml set to hold ("" leaves the default).
func withHold(files map[string]string, hold string) map[string]string {
	if hold != "" {
		files[".ai/config/agent/graphs.yaml"] = hold
	}
	return files
}

// TestGraphNodeKinds runs a graph with every node kind but approval (its
// own test): gate, tool actions, a sync child, a sequential and a
// parallel foreach of children (a window of 2), two async children and a
// wait that joins them, a branch and a return; with the run held while
// its children run, and suspended.
func TestGraphNodeKinds(t *testing.T) {
	t.Parallel()
	for mode, hold := range holdModes {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testGraphNodeKinds(t, hold)
		})
	}
}

func testGraphNodeKinds(t *testing.T, hold string) {
	e := workerEnv(t, withHold(walkProject("20ms", map[string]string{"g/kinds": kindsGraph}), hold), "4")
	rec, res := runGraph(t, e, "g/kinds")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status)
	if hold == "" {
		// A run whose children end within the hold is not suspended (a
		// child slowed past the 5 s hold by a loaded machine may add a
		// wake, so a little room).
		require.LessOrEqual(t, rec.Activation, int64(3), "a run whose children end within the hold is not suspended")
	} else {
		require.Greater(t, rec.Activation, int64(5), "a run without a hold is woken by its children")
	}
	require.Equal(t, registry.KindGraph, rec.Kind)
	require.Equal(t, map[string]any{"ok": true, "solo": "item solo", "read": "count 3", "seq": float64(3),
		"second": "item seq-b", "par": float64(5), "joined": float64(2)}, rec.Outputs)
	require.Equal(t, 10, rec.Cost.Steps)
	require.Equal(t, 10, rec.Step)
	checkRunExact(t, e, rec, 11)
	require.InDelta(t, 11*itemSpend, rec.Cost.Spend, 1e-9)

	s := showGraph(t, e, rec.ThreadID)
	require.Len(t, s.Nodes, 11)
	require.Equal(t, "completed", nodeStatus(s, "par"))
	require.Equal(t, "not_reached", nodeStatus(s, "never"))
	require.Equal(t, "graph", s.Record.Kind)

	// The window: never more than 2 of par's children at once.
	var starts, ends []time.Time
	for _, k := range children(t, e, rec.ThreadID) {
		if n, _ := k.Inputs["n"].(string); strings.HasPrefix(n, "par-") {
			starts, ends = append(starts, k.StartedAt), append(ends, k.UpdatedAt)
		}
	}
	require.Len(t, starts, 5)
	for _, at := range starts {
		live := 0
		for i := range starts {
			if !starts[i].After(at) && ends[i].After(at) {
				live++
			}
		}
		require.LessOrEqual(t, live, 2, "more than max_concurrency children ran at once")
	}

	// tree, budget show and transcript take the run id.
	res = e.Spool("thread", "tree", rec.ThreadID)
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Contains(t, res.Stdout, "g/item")
	res = e.Spool("budget", "show", rec.ThreadID, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var b struct{ Actual float64 }
	res.JSON(t, &b)
	require.InDelta(t, 11*itemSpend, b.Actual, 1e-9)
	res = e.Spool("graph", "transcript", rec.ThreadID, "--format", "jsonl")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Contains(t, res.Stdout, `"graph_started"`)
	require.Contains(t, res.Stdout, `"foreach_item_completed"`)
	res = e.Spool("graph", "state", rec.ThreadID, "--step", "1")
	require.Equal(t, 0, res.Code, res.Stderr)
	var st map[string]any
	res.JSON(t, &st)
	require.Equal(t, float64(3), st["count"])
	require.Nil(t, st["solo"], "the state after step 1 has nothing later steps assigned")
}

const errorsGraph = `limits: {max_steps: 20}
config:
  start: flaky
  on_error: continue
  nodes:
    flaky:
      action: {tool: rye/file-system/fs_read, params: {path: "missing.txt"}}
      retry: {attempts: 2, backoff: 100ms}
      on_error: handle
      next: never
    handle:
      type: gate
      assign: {first: "${state._last_error.code}"}
      next: some
    some:
      type: foreach
      over: '["a", "bad", "c"]'
      on_item_error: continue
      action: {directive: g/item, inputs: {n: "${item}"}}
      assign: {failed: "${result.failed}", kept: "${result.results.2.outputs.value}"}
      next: broken
    broken:
      action: {directive: g/item, inputs: {n: bad-again}}
      next: done
    never:
      type: return
      output: {ok: false}
    done:
      type: return
      output: {first: "${state.first}", failed: "${state.failed}", kept: "${state.kept}", errors: "${state._errors | length}"}
`

const failGraph = `config:
  start: boom
  nodes:
    boom:
      action: {directive: g/item, inputs: {n: bad}}
      next: done
    done:
      type: return
`

const loopGraph = `limits: {max_steps: 5}
config:
  start: spin
  nodes:
    spin:
      type: gate
      assign: {n: 1}
      next:
        - when: {path: state.n, op: gt, value: 100}
          to: out
        - to: spin
    out:
      type: return
`

const edgeGraph = `inputs:
  type: object
  properties:
    x: {type: integer}
config:
  start: pick
  nodes:
    pick:
      type: gate
      next:
        - when: {path: inputs.x, op: eq, value: 1}
          to: out
    out:
      type: return
`

// misspeltGraph assigns a field fs_read's result does not have (it is
// {"text": ...}).
const misspeltGraph = `config:
  start: write
  nodes:
    write:
      action: {tool: rye/file-system/fs_write, params: {path: notes.md, content: "notes"}}
      next: read
    read:
      action: {tool: rye/file-system/fs_read, params: {path: notes.md}}
      assign: {content: "${result.content}", text: "${result.text}"}
      next: out
    out:
      type: return
      output: {content: "${state.content}", text: "${state.text}"}
`

// TestGraphErrors: a retried tool step routed by its on_error, a foreach
// whose failed item leaves a null slot, a failure the graph's on_error
// continue suppresses; a failure that fails the run with node_error; a
// loop stopped by max_steps; a step with no matching edge; an assign of
// a field the result lacks, null as section 7 says, and named in the
// step's record.
func TestGraphErrors(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, walkProject("0ms", map[string]string{"g/errors": errorsGraph, "g/fail": failGraph, "g/loop": loopGraph,
		"g/edge": edgeGraph, "g/misspelt": misspeltGraph}), "4")

	rec, res := runGraph(t, e, "g/errors")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status)
	require.Equal(t, map[string]any{"first": "tool_error", "failed": float64(1), "kept": "item c", "errors": float64(1)}, rec.Outputs)
	require.Equal(t, 1, rec.SuppressedErrors)
	var retries, routed int
	for _, sc := range stepEvents(t, e, rec.ThreadID) {
		if sc.Status == "retry" {
			retries++
		}
		if sc.Node == "flaky" && sc.Status == "error" && sc.RoutedBy == "on_error" {
			routed++
		}
	}
	require.Equal(t, 1, retries, "attempts: 2 is one retry")
	require.Equal(t, 1, routed)

	rec, res = runGraph(t, e, "g/fail")
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Equal(t, thread.StatusError, rec.Status)
	require.Equal(t, "node_error", rec.Error.Code)
	require.True(t, strings.HasPrefix(rec.Error.Message, "boom: "), rec.Error.Message)
	s := showGraph(t, e, rec.ThreadID)
	require.Equal(t, "error", nodeStatus(s, "boom"))

	rec, res = runGraph(t, e, "g/loop")
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Equal(t, "max_steps_exceeded", rec.Error.Code)
	require.Equal(t, 5, rec.Step)

	rec, res = runGraph(t, e, "g/edge", "--input", "x=2")
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Equal(t, "node_error", rec.Error.Code)
	require.Contains(t, rec.Error.Message, "no condition")

	rec, res = runGraph(t, e, "g/misspelt")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, map[string]any{"content": nil, "text": "notes"}, rec.Outputs)
	const why = "content: ${result.content} resolved to nothing (result has "
	res = e.Spool("graph", "show", rec.ThreadID)
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Contains(t, res.Stdout, "null "+why, "the node table says why content is null")
	res = e.Spool("graph", "show", rec.ThreadID, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var shown struct {
		Steps []struct {
			Node       string   `json:"node"`
			Unresolved []string `json:"unresolved"`
		} `json:"steps"`
	}
	res.JSON(t, &shown)
	var unresolved []string
	for _, st := range shown.Steps {
		if st.Node == "read" {
			unresolved = st.Unresolved
		}
	}
	require.Len(t, unresolved, 1, res.Stdout)
	require.True(t, strings.HasPrefix(unresolved[0], why), unresolved[0])
	require.Contains(t, unresolved[0], "text", "what the result has")
}

// TestGraphRefusals: bad input, an unknown or invalid graph and a bad
// limit are refused (exit 2, one line) before anything is registered.
func TestGraphRefusals(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: walkProject("0ms", map[string]string{
		"g/kinds": kindsGraph,
		"g/bad":   "config:\n  start: nowhere\n  nodes:\n    a: {type: gate, nxet: a}\n",
		// An unknown kind, an unknown namespace and an unknown target,
		// all reported in one pass.
		"g/typos": "config:\n  start: a\n  nodes:\n    a: {type: gat, assign: {v: '${stat.x}'}, next: doen}\n    done: {type: return}\n",
	})})
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"g/kinds", "--inputs-json", `{"items": "not a list"}`}, "items"},
		{[]string{"g/kinds", "--input", "nope=1"}, "nope"},
		{[]string{"g/missing"}, "not found"},
		{[]string{"g/bad"}, "nxet"},
		{[]string{"g/typos"}, "unknown namespace `stat`"},
		{[]string{"g/kinds", "--limit", "max_steps=0"}, "max_steps"},
		{[]string{"g/kinds", "--limit", "turns=x"}, "turns"},
	} {
		res := e.Spool(append([]string{"graph", "run"}, c.args...)...)
		require.Equal(t, 2, res.Code, "%v: %s", c.args, res.Stderr)
		require.Contains(t, res.Stderr, c.want, c.args)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(res.Stderr), "\n")+1, "one line: %q", res.Stderr)
	}
	recs, err := e.Orch.Threads(t.Context(), registry.Filter{})
	require.NoError(t, err)
	require.Empty(t, recs, "nothing was registered")
	res := e.Spool("graph", "validate", ".ai/graphs/g/kinds.yaml", "g/bad", "g/typos")
	require.Equal(t, 1, res.Code, res.Stdout+res.Stderr)
	require.Contains(t, res.Stdout, ".ai/graphs/g/kinds.yaml: ok")
	require.Contains(t, res.Stdout, "g/bad: error:")
	for _, want := range []string{"unknown node kind `gat`", "unknown node `doen`", "${stat.x}: unknown namespace `stat`"} {
		require.Contains(t, res.Stdout, want, "validate reports every error of g/typos")
	}
}

const approveGraph = `inputs:
  type: object
  properties:
    what: {type: string}
config:
  start: ask
  nodes:
    ask:
      type: approval
      prompt: "Ship ${inputs.what}?"
      next:
        - when: {path: result.approved, op: eq, value: true}
          to: yes
        - to: no
    yes:
      type: return
      output: {shipped: true}
    no:
      type: return
      output: {shipped: false}
`

// TestGraphApproval: an approval node waits (no slot) with a pending
// call people see in `thread approvals`; the decision routes the run.
func TestGraphApproval(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, walkProject("0ms", map[string]string{"g/approve": approveGraph}), "2")
	for _, decide := range []string{"approve", "deny"} {
		res := e.Spool("graph", "run", "g/approve", "--input", "what=v2", "--json")
		require.Equal(t, 0, res.Code, res.Stderr)
		var rec registry.Record
		res.JSON(t, &rec)
		w := waitStatus(t, e, rec.ThreadID, thread.StatusWaiting)
		require.Equal(t, registry.WaitingForApproval, w.WaitingFor)
		require.Len(t, w.PendingApprovals, 1)
		require.Equal(t, "graph:approval", w.PendingApprovals[0].Tool)
		require.Contains(t, string(w.PendingApprovals[0].Input), "Ship v2?")
		args := []string{"thread", decide, rec.ThreadID}
		if decide == "deny" {
			args = append(args, "--reason", "not today")
		}
		res = e.Spool(args...)
		require.Equal(t, 0, res.Code, res.Stderr)
		final := e.Wait([]string{rec.ThreadID}, time.Minute)[rec.ThreadID]
		require.Equal(t, thread.StatusCompleted, final.Status)
		require.Equal(t, decide == "approve", final.Outputs["shipped"])
	}
}

const cancelGraph = `config:
  start: fan
  nodes:
    fan:
      type: foreach
      over: '["a", "b", "c", "d", "e", "f"]'
      parallel: true
      max_concurrency: 3
      action: {directive: g/item, inputs: {n: "${item}"}}
      next: done
    done:
      type: return
`

// TestGraphCancelCascades: cancelling a run during a foreach cancels its
// running children, starts no more, and ends the run cancelled.
func TestGraphCancelCascades(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, walkProject("2s", map[string]string{"g/cancel": cancelGraph}), "4")
	res := e.Spool("graph", "run", "g/cancel", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var rec registry.Record
	res.JSON(t, &rec)
	require.Eventually(t, func() bool { return len(children(t, e, rec.ThreadID)) == 3 }, time.Minute, 20*time.Millisecond)
	res = e.Spool("graph", "cancel", rec.ThreadID)
	require.Equal(t, 0, res.Code, res.Stderr)
	final := e.Wait([]string{rec.ThreadID}, time.Minute)[rec.ThreadID]
	require.Equal(t, thread.StatusCancelled, final.Status)
	kids := children(t, e, rec.ThreadID)
	require.Len(t, kids, 3, "no item started after the cancel")
	for _, k := range kids {
		k = waitStatus(t, e, k.ThreadID, thread.StatusCancelled, thread.StatusCompleted)
		require.Equal(t, thread.StatusCancelled, k.Status, k.ThreadID)
	}
}

const resumeGraph = `config:
  start: items
  state: {suffix: ""}
  nodes:
    items:
      type: foreach
      over: '["a", "b", "bad", "c"]'
      on_item_error: fail
      action: {directive: g/item, inputs: {n: "${item}${state.suffix}"}}
      collect: out
      next: done
    done:
      type: return
      output: {values: "${state.out | length}", last: "${state.out.3.outputs.value}", first: "${state.out.0.outputs.value}"}
`

// TestGraphResume: a foreach fails at an item; the resume (with a state
// edit) runs only the items without a result and completes, the chain
// followed by wait.
func TestGraphResume(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, walkProject("0ms", map[string]string{"g/resume": resumeGraph}), "2")
	rec, res := runGraph(t, e, "g/resume")
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Equal(t, "node_error", rec.Error.Code)
	require.Len(t, children(t, e, rec.ThreadID), 3, "a, b, bad: c never started")

	res = e.Spool("graph", "resume", rec.ThreadID, "--set", `suffix="-ok"`, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var rr struct {
		NewThreadID string `json:"new_thread_id"`
	}
	res.JSON(t, &rr)
	final := e.Wait([]string{rec.ThreadID}, time.Minute)[rec.ThreadID]
	require.Equal(t, rr.NewThreadID, final.ThreadID, "wait follows the chain")
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, map[string]any{"values": float64(4), "last": "item c-ok", "first": "item a"}, final.Outputs)
	require.Len(t, children(t, e, final.ThreadID), 2, "only bad-ok and c-ok ran again")
	old, err := e.Orch.Record(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.Equal(t, thread.StatusContinued, old.Status)

	res = e.Spool("graph", "resume", final.ThreadID)
	require.NotEqual(t, 0, res.Code)
	require.Contains(t, res.Stderr, "fork")
}

const budgetGraph = `limits: {spend: 0.0007}
config:
  start: items
  nodes:
    items:
      type: foreach
      over: '["a", "b", "c", "d"]'
      on_item_error: continue
      action: {directive: g/item, inputs: {n: "${item}"}}
      assign: {failed: "${result.failed}"}
      next: done
    done:
      type: return
      output: {failed: "${state.failed}"}
`

// TestGraphSpendCeiling: a graph's spend limit holds its whole subtree:
// children past it are refused or clamped, and the run never spends more.
func TestGraphSpendCeiling(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, walkProject("0ms", map[string]string{"g/budget": budgetGraph}), "2")
	rec, res := runGraph(t, e, "g/budget")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.GreaterOrEqual(t, rec.Outputs["failed"], float64(1))
	require.LessOrEqual(t, rec.Cost.Spend, 0.0007+1e-12)
	entry, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.LessOrEqual(t, entry.Actual, 0.0007+1e-12)
	var refused bool
	for _, ev := range payloads[transcript.ForeachItemCompleted](t, events(t, e, rec.ThreadID), transcript.TypeForeachItemCompleted) {
		if ev.Error != nil && ev.Error.Code == thread.CodeSpendExceeded {
			refused = true
		}
	}
	require.True(t, refused, "an item was refused or ended spend_exceeded")
}

const crashGraph = `limits: {spawns: 20}
config:
  start: fan
  nodes:
    fan:
      type: foreach
      over: '["a", "b", "c", "d"]'
      parallel: true
      max_concurrency: 2
      action: {directive: g/item, inputs: {n: "${item}"}}
      collect: out
      next: solo
    solo:
      action: {directive: g/item, inputs: {n: solo}}
      next: done
    done:
      type: return
      output: {n: "${state.out | length}"}
`

// TestGraphCrashExact kills the worker walking a run (SIGKILL, from
// inside, exactly at each point of the stepping protocol) and lets
// another take it over: the run completes, no step completes twice, no
// child is started twice, and the ledger counts each child's spend once;
// with the run held while its children run, and suspended.
func TestGraphCrashExact(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"graph:after_plan", "graph:after_start", "graph:after_item", "graph:before_complete", "graph:before_complete#3"} {
		for mode, hold := range holdModes {
			t.Run(strings.NewReplacer(":", "_", "#", "_").Replace(point)+"/"+mode, func(t *testing.T) {
				t.Parallel()
				testGraphCrashExact(t, point, hold)
			})
		}
	}
}

func testGraphCrashExact(t *testing.T, point, hold string) {
	// A held run makes settled items durable once a second has passed
	// (graph:after_item): its children take long enough for that.
	latency := "50ms"
	if hold == "" {
		latency = "700ms"
	}
	e := spooltest.New(t, spooltest.Options{Files: withHold(walkProject(latency, map[string]string{"g/crash": crashGraph}), hold), LeaseTTL: 2 * time.Second})
	fast := "SPOOL_RECOVER_INTERVAL=500ms"
	doomed := e.Start([]string{fast, "SPOOL_FAULT_KILL_AT=" + point}, "worker", "--concurrency", "4")
	res := e.Spool("graph", "run", "g/crash", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var rec registry.Record
	res.JSON(t, &rec)
	require.Eventually(t, doomed.Exited, time.Minute, 20*time.Millisecond, "the worker never reached %s:\n%s", point, doomed.Log())
	e.Start([]string{fast}, "worker", "--concurrency", "4")
	final := e.Wait([]string{rec.ThreadID}, 2*time.Minute)[rec.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, map[string]any{"n": float64(4)}, final.Outputs)
	require.Greater(t, final.Activation, int64(1), "another activation took the run over")
	checkRunExact(t, e, final, 5)
}

const spawnOnce = `# spawner

Spawns one child and waits for it.

` + "```xml" + `
<directive name="spawner" version="1.0.0">
  <metadata>
    <description>spawns a child</description>
    <limits turns="4" spend="0.5" />
    <permissions>` + spawnPerms + `</permissions>
  </metadata>
  <outputs><success>done</success></outputs>
</directive>
` + "```\n"

// TestSpawnHappensOnce: a worker dies in a spawning turn, before the
// turn's checkpoint: before the child registers, or after (the child then
// runs to its end on another worker while the parent waits for its lease
// to lapse); the turn runs again on another worker and adopts the child
// the first run started: one child, charged once; on each Redis topology
// (standalone, Sentinel, Cluster).
func TestSpawnHappensOnce(t *testing.T) {
	t.Parallel()
	onEachTopology(t, func(t *testing.T, top testenv.Topology) {
		for _, point := range []string{"thread:before_spawn", "thread:after_spawn"} {
			t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
				t.Parallel()
				testSpawnHappensOnce(t, top, point)
			})
		}
	})
}

func testSpawnHappensOnce(t *testing.T, top testenv.Topology, point string) {
	files := walkProject("100ms", nil)
	files[".ai/directives/g/spawner.md"] = spawnOnce
	files["scripts/g.yaml"] += `  "g/spawner":
    - tool_calls:
        - tool: rye/agent/threads/thread_directive
          input: {directive_name: g/item, inputs: {n: child}}
      usage: {input: 100, output: 10}
    - text: "child said {{.last_tool_result}}"
      usage: {input: 100, output: 10}
`
	e := spooltest.New(t, spooltest.Options{Files: files, LeaseTTL: 2 * time.Second, Topology: top})
	fast := "SPOOL_RECOVER_INTERVAL=500ms"
	doomed := e.Start([]string{fast, "SPOOL_FAULT_KILL_AT=" + point}, "worker", "--concurrency", "2")
	id := startThread(t, e, "g/spawner", "--model", "script:scripts/g.yaml")
	require.Eventually(t, doomed.Exited, time.Minute, 20*time.Millisecond, doomed.Log())
	e.Start([]string{fast}, "worker", "--concurrency", "2")
	final := e.Wait([]string{id}, 2*time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	kids := children(t, e, id)
	require.Len(t, kids, 1, "the rerun turn adopted the child: %v", threadIDs(kids))
	require.Equal(t, thread.StatusCompleted, kids[0].Status)
	require.Equal(t, 2, kids[0].Cost.Turns, "the child ran once")
	spawned := payloads[transcript.ChildSpawned](t, events(t, e, id), transcript.TypeChildSpawned)
	require.Len(t, spawned, 1)
	require.Equal(t, kids[0].ThreadID, spawned[0].ChildID)
	entry, err := e.Orch.LedgerEntry(t.Context(), id)
	require.NoError(t, err)
	require.InDelta(t, final.Cost.Spend+kids[0].Cost.Spend, entry.Actual, 1e-9, "each turn charged once")
	sp, err := e.Redis.Universal.Get(t.Context(), e.Keys.Spawns(id)).Int()
	require.NoError(t, err)
	require.Equal(t, 1, sp, "the spawn counted once")
}
