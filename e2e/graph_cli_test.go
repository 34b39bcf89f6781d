package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestGraphFork forks a run from the command line at each of its steps
// (`spool graph fork RUN --at-step N [--set K=JSON] [--from NODE]`): the
// fork starts from the checkpoint after the step, with the edits, and
// runs the rest again with children of its own, in a workspace of its
// own that holds what the run had written by then; the run is left as it
// is; thread tree shows the fork under the run, at its step; bad usage
// exits 2 with one line.
func TestGraphFork(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, nil)
	res := e.Spool("graph", "run", "g/review", "--inputs-json", `{"topics": ["a", "b", "c"]}`, "--wait", "--json", "--timeout", "3m")
	require.Equal(t, 0, res.Code, res.Stderr)
	var src registry.Record
	res.JSON(t, &src)
	require.Equal(t, thread.StatusCompleted, src.Status)

	// At step 1 (after plan), with a state edit: the foreach runs again.
	res = e.Spool("graph", "fork", src.ThreadID, "--at-step", "1", "--set", "planned=7", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var out struct {
		ForkedFrom     string           `json:"forked_from"`
		ForkStep       int              `json:"fork_step"`
		Steps          int              `json:"steps"`
		NextNode       string           `json:"next_node"`
		StateEdits     []string         `json:"state_edits"`
		Budget         float64          `json:"budget"`
		WorkspaceFiles int              `json:"workspace_files"`
		Run            *registry.Record `json:"run"`
	}
	res.JSON(t, &out)
	require.Equal(t, src.ThreadID, out.ForkedFrom)
	require.Equal(t, 1, out.ForkStep)
	require.Equal(t, 3, out.Steps)
	require.Equal(t, "review", out.NextNode)
	require.Equal(t, []string{"planned"}, out.StateEdits)
	require.InDelta(t, 0.5, out.Budget, 1e-9, "nothing was spent by step 1")
	require.Equal(t, 1, out.WorkspaceFiles, "plan.md, written at step 1")
	waited := e.Spool("graph", "wait", out.Run.ThreadID, "--json", "--timeout", "2m")
	require.Equal(t, 0, waited.Code, "graph wait waits for a run as thread wait does: %s", waited.Stderr)
	require.Contains(t, waited.Stdout, `"status": "completed"`)
	fork := e.Wait([]string{out.Run.ThreadID}, 2*time.Minute)[out.Run.ThreadID]
	require.Equal(t, thread.StatusCompleted, fork.Status, "%+v", fork.Error)
	require.Equal(t, map[string]any{"reviewed": 3.0, "failed": 0.0, "planned": 7.0}, fork.Outputs)
	require.Equal(t, src.ThreadID, fork.ForkedFrom)
	require.Equal(t, 1, fork.ForkTurn)
	require.Equal(t, 3, fork.Step, "the step counter goes on from the fork's step")
	kids, err := e.Orch.Children(t.Context(), fork.ThreadID)
	require.NoError(t, err)
	require.Len(t, kids, 3, "the fork's own children")

	// At step 2 (after the foreach), from another node, waiting: what the
	// run had spent by then is not the fork's.
	res = e.Spool("graph", "fork", src.ThreadID, "--at-step", "2", "--from", "rejected", "--wait", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var f2 registry.Record
	res.JSON(t, &f2)
	require.Contains(t, res.Stdout, `"fork_step": 2`, "a graph fork's record names its step")
	require.Equal(t, map[string]any{"rejected": true}, f2.Outputs)
	require.Equal(t, 3, f2.Step)
	require.InDelta(t, 0.5-src.Cost.Spend, f2.Limits.Spend, 1e-9, "the fork carries what the run had left after step 2")
	kids, err = e.Orch.Children(t.Context(), f2.ThreadID)
	require.NoError(t, err)
	require.Empty(t, kids, "nothing after step 2 starts a child")

	// The run is as it was; the tree shows both forks at their steps.
	again := e.Spool("graph", "show", src.ThreadID, "--json")
	require.Equal(t, 0, again.Code, again.Stderr)
	var shown map[string]any
	again.JSON(t, &shown)
	require.Equal(t, src.Outputs, shown["outputs"])
	tree := e.Spool("thread", "tree", src.ThreadID)
	require.Equal(t, 0, tree.Code, tree.Stderr)
	require.Contains(t, tree.Stdout, src.ThreadID+"  completed  graph  3 steps")
	require.Contains(t, tree.Stdout, "⑂ "+fork.ThreadID+"  completed  graph  3 steps")
	require.Contains(t, tree.Stdout, "fork of "+src.ThreadID+" at step 1")
	require.Contains(t, tree.Stdout, "fork of "+src.ThreadID+" at step 2")
	tj := e.Spool("thread", "tree", src.ThreadID, "--json")
	var node struct {
		Kind  string `json:"kind"`
		Step  int    `json:"step"`
		Forks []struct {
			ThreadID string `json:"thread_id"`
			Kind     string `json:"kind"`
			ForkTurn int    `json:"fork_turn"`
		} `json:"forks"`
	}
	require.NoError(t, json.Unmarshal([]byte(tj.Stdout), &node), tj.Stdout)
	require.Equal(t, "graph", node.Kind)
	require.Equal(t, 3, node.Step)
	require.Len(t, node.Forks, 2)

	// Bad usage: one line, exit 2; nothing is started.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"graph", "fork", src.ThreadID}, "needs --at-step N"},
		{[]string{"graph", "fork", src.ThreadID, "--at-step", "9"}, "there is no completed step 9"},
		{[]string{"graph", "fork", src.ThreadID, "--at-step", "1", "--from", "nowhere"}, "--from nowhere: graph g/review has no such node"},
		{[]string{"graph", "fork", src.ThreadID, "--at-step", "1", "--set", "inputs={}"}, "--set inputs"},
		{[]string{"graph", "fork", src.ThreadID, "--at-step", "1", "--set", "k=not json"}, "--set k: the value is not JSON"},
	} {
		res := e.Spool(c.args...)
		require.Equal(t, 2, res.Code, "%v: %s%s", c.args, res.Stdout, res.Stderr)
		require.Contains(t, res.Stderr, c.want)
		require.Equal(t, 1, strings.Count(strings.TrimSpace(res.Stderr), "\n")+1, "one line: %q", res.Stderr)
	}
	forks, err := e.Orch.Housekeeper().Forks(t.Context(), src.ThreadID)
	require.NoError(t, err)
	require.Len(t, forks, 2, "no refused fork was started")
	srcKids, err := e.Orch.Children(t.Context(), src.ThreadID)
	require.NoError(t, err)
	res = e.Spool("graph", "fork", srcKids[0].ThreadID, "--at-step", "1")
	require.Equal(t, 1, res.Code)
	require.Contains(t, res.Stderr, "is a thread, not a graph run")
}

// TestGraphSchedule: a schedules.yaml entry that names a graph: starts a
// run of it at each tick (spool scheduler), with the entry's inputs and
// limits, walked to its end by a worker; an entry that names a graph the
// project does not have keeps the scheduler from starting, naming it.
func TestGraphSchedule(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, map[string]string{".ai/config/schedules.yaml": `schedules:
  - id: nightly
    graph: g/review
    cron: "@every 2s"
    inputs: {topics: [sched]}
    limits: {max_steps: 9, spend: 0.25}
`})
	sched := e.Start(nil, "scheduler")
	var run *registry.Record
	require.Eventually(t, func() bool {
		recs, err := e.Orch.Threads(t.Context(), registry.Filter{Kind: registry.KindGraph, Directive: "g/review"})
		if err != nil || len(recs) == 0 {
			return false
		}
		run = recs[len(recs)-1]
		return true
	}, time.Minute, 100*time.Millisecond, "a scheduled run:\n%s", sched.Log())
	require.Equal(t, 9, run.MaxSteps)
	require.InDelta(t, 0.25, run.Limits.Spend, 1e-9)
	final := e.Wait([]string{run.ThreadID}, 2*time.Minute)[run.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, map[string]any{"reviewed": 1.0, "failed": 0.0, "planned": 1.0}, final.Outputs)
	require.NoError(t, sched.Stop(20*time.Second))

	badFile := filepath.Join(t.TempDir(), "schedules.yaml")
	require.NoError(t, os.WriteFile(badFile, []byte("schedules:\n  - {id: nope, graph: g/nope, cron: '@hourly'}\n"), 0o644))
	bad := e.Spool("scheduler", "--schedules", badFile)
	require.NotEqual(t, 0, bad.Code)
	require.Contains(t, bad.Stderr, `schedule "nope"`)
	require.Contains(t, bad.Stderr, "g/nope")
}
