package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/scheduler"
)

// TestParseGraphEntries: an entry may name a graph instead of a
// directive, with max_steps among its limits; naming both, a model for
// a graph, or a bad graph name is an error naming the entry and line.
func TestParseGraphEntries(t *testing.T) {
	t.Parallel()
	entries, err := scheduler.Parse("schedules.yaml", []byte(`schedules:
  - id: nightly-review
    graph: review/nightly.yaml
    cron: "0 4 * * *"
    inputs: {topics: [a, b]}
    limits: {spend: 2, max_steps: 50}
  - id: hello
    directive: demo/hello
    cron: "@hourly"
`))
	require.NoError(t, err)
	require.Len(t, entries, 2)
	g := entries[0]
	require.True(t, g.Graph)
	require.Equal(t, "review/nightly", g.Directive)
	require.Equal(t, 50, g.MaxSteps)
	require.InDelta(t, 2.0, *g.Limits.Spend, 1e-9)
	require.False(t, entries[1].Graph)

	for _, c := range []struct{ doc, want string }{
		{"- {id: a, graph: x/y, directive: x/z, cron: '@hourly'}", `schedules.yaml:1: entry "a": directive and graph: name one of them`},
		{"- {id: a, graph: x/y, model: m, cron: '@hourly'}", `entry "a": model: a graph run calls no model`},
		{"- {id: a, graph: ../y, cron: '@hourly'}", `entry "a": graph "../y"`},
		{"- {id: a, cron: '@hourly'}", `entry "a": directive: required (or graph: for a graph run)`},
		{"- {id: a, graph: x/y, cron: '@hourly', limits: {max_steps: 0}}", `entry "a": limits: max_steps "0": want a whole number from 1 to 10000`},
		{"- {id: a, directive: x/y, cron: '@hourly', limits: {max_steps: 3}}", `entry "a": limits:`},
	} {
		_, err := scheduler.Parse("schedules.yaml", []byte(c.doc))
		require.ErrorContains(t, err, c.want, c.doc)
	}
}

// TestFireGraphEntry: a graph entry's tick starts a graph run with the
// tick's id, the entry's inputs and limits; Check validates the graph and
// its inputs.
func TestFireGraphEntry(t *testing.T) {
	t.Parallel()
	e := setup(t)
	testenv.WriteFiles(t, e.project, map[string]string{".ai/graphs/sched/flow.yaml": `version: "1.0.0"
description: a scheduled graph
permissions: [rye.execute.tool.rye.file-system.*]
inputs:
  type: object
  properties:
    who: {type: string}
config:
  start: note
  nodes:
    note:
      action: {tool: rye/file-system/fs_write, params: {path: who.md, content: "${inputs.who}"}}
      next: done
    done:
      type: return
`})
	o := e.orch(nil)
	entries := e.entries("schedules:\n  - {id: g, graph: sched/flow, cron: '@every 1s', inputs: {who: cron}, limits: {max_steps: 7, spend: 0.3}}\n")
	s := e.scheduler(scheduler.Config{Entries: entries}, o)
	require.NoError(t, s.Check(context.Background()))
	tick := scheduler.Every(time.Second).Next(time.Now())
	res, err := s.Fire(context.Background(), "g", tick)
	require.NoError(t, err)
	require.Equal(t, scheduler.OutcomeStarted, res.Outcome)
	require.Equal(t, scheduler.TickThreadID("sched/flow", "g", tick), res.ThreadID)
	rec, err := o.Record(context.Background(), res.ThreadID)
	require.NoError(t, err)
	require.Equal(t, registry.KindGraph, rec.Kind)
	require.Equal(t, "sched/flow", rec.Directive)
	require.Equal(t, 7, rec.MaxSteps)
	require.InDelta(t, 0.3, rec.Limits.Spend, 1e-9)
	require.Equal(t, "cron", rec.Inputs["who"])

	bad := e.scheduler(scheduler.Config{Entries: e.entries("schedules:\n  - {id: g, graph: sched/flow, cron: '@hourly', inputs: {who: 3}}\n")}, o)
	require.ErrorContains(t, bad.Check(context.Background()), `schedule "g": graph sched/flow`)
	missing := e.scheduler(scheduler.Config{Entries: e.entries("schedules:\n  - {id: g, graph: sched/nope, cron: '@hourly'}\n")}, o)
	require.ErrorContains(t, missing.Check(context.Background()), "sched/nope")
}
