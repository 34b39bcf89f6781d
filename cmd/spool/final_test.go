package main

import (
	"bytes"
	"flag"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestPrintFinal: every command that waits for a run ends through
// printFinal: --json prints the record as it is, else a thread's text
// view; an end other than completed fails with exit 1, naming a thread
// as a thread and a graph run as a run, with its error's line.
func TestPrintFinal(t *testing.T) {
	t.Parallel()
	existing := true
	for _, c := range []struct {
		name string
		json bool
		rec  registry.Record
		out  string // the output's first line (--json: all of it)
		exit string // "": none
	}{
		{name: "thread completed", rec: registry.Record{ThreadID: "t/a-1", Directive: "t/a", Status: thread.StatusCompleted},
			out: "thread     t/a-1"},
		{name: "thread failed", rec: registry.Record{ThreadID: "t/a-1", Directive: "t/a", Status: thread.StatusError,
			Error: &registry.ErrorInfo{Code: "turns_exceeded", Message: "turns_exceeded: 3 of 3"}},
			out: "thread     t/a-1", exit: "thread t/a-1 ended error: turns_exceeded: 3 of 3"},
		{name: "thread json", json: true, rec: registry.Record{ThreadID: "t/a-1", Directive: "t/a", Status: thread.StatusCompleted, Existing: &existing}},
		{name: "run cancelled json", json: true, rec: registry.Record{ThreadID: "g-1", Directive: "g", Kind: registry.KindGraph,
			Status: thread.StatusCancelled}, exit: "run g-1 ended cancelled"},
		{name: "run failed json", json: true, rec: registry.Record{ThreadID: "g-1", Directive: "g", Kind: registry.KindGraph,
			Status: thread.StatusError, Error: &registry.ErrorInfo{Code: "step_failed", Message: "node a"}},
			exit: "run g-1 ended error: step_failed: node a"},
	} {
		var out bytes.Buffer
		set := flag.NewFlagSet(c.name, flag.ContinueOnError)
		set.Bool("json", c.json, "")
		ctx := cli.NewContext(&cli.App{Writer: &out}, set, nil)
		err := printFinal(ctx, nil, &c.rec)
		if c.json {
			var want bytes.Buffer
			require.NoError(t, printJSON(&want, &c.rec))
			require.Equal(t, want.String(), out.String(), c.name)
		} else {
			first, _, _ := strings.Cut(out.String(), "\n")
			require.Equal(t, c.out, first, c.name)
		}
		if c.exit == "" {
			require.NoError(t, err, c.name)
			continue
		}
		var ee *exitError
		require.ErrorAs(t, err, &ee, c.name)
		require.Equal(t, 1, ee.code, c.name)
		require.EqualError(t, err, c.exit, c.name)
	}
}
