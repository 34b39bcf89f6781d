package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// pauseCommands are `pause` and `unpause` for thread (and graph): one
// pair serves threads and graph runs alike.
func pauseCommands(noun string) []*cli.Command {
	tree := func() cli.Flag {
		return &cli.BoolFlag{Name: "tree", Usage: "the whole tree " + noun + " belongs to, from its root"}
	}
	return []*cli.Command{
		{Name: "pause", Usage: "pause a run and its descendants at their next checkpoint boundary", ArgsUsage: noun,
			Description: "A waiting run is paused at once; a running one at its next boundary (before a turn, between graph steps),\n" +
				"where its last checkpoint is. A paused run holds no worker slot and shows status paused; a child spawned\n" +
				"after the request is paused too. `unpause` lets it go on where it was. Exits 1 (run_ended) for a run that has ended.",
			Flags: []cli.Flag{jsonFlag(), tree()}, Action: func(c *cli.Context) error { return pauseAction(c, true) }},
		{Name: "unpause", Usage: "let a paused run and its descendants go on where they were", ArgsUsage: noun,
			Flags: []cli.Flag{jsonFlag(), tree()}, Action: func(c *cli.Context) error { return pauseAction(c, false) }},
	}
}

// pauseAction is `pause` (pause true) and `unpause`.
func pauseAction(c *cli.Context, pause bool) error {
	id, s, err := openID(c, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	op := s.orch.Unpause
	if pause {
		op = s.orch.Pause
	}
	r, err := op(c.Context, id, c.Bool("tree"))
	if err != nil {
		return notFound(id, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
	}
	fmt.Fprintln(c.App.Writer, pauseLine(r, pause))
	return nil
}

// pauseLine says what a pause or unpause did, in one line.
func pauseLine(r *orchestrator.PauseResult, pause bool) string {
	runs := fmt.Sprintf("%d run", r.Runs)
	if r.Runs != 1 {
		runs += "s"
	}
	if !pause {
		return fmt.Sprintf("%s  unpaused (status %s; %s)", r.ThreadID, r.Status, runs)
	}
	if r.Paused == r.Runs {
		return fmt.Sprintf("%s  paused (%s)", r.ThreadID, runs)
	}
	return fmt.Sprintf("%s  pause requested (status %s; %s, %d paused now, the rest at their next boundary)", r.ThreadID, r.Status, runs, r.Paused)
}

// statusNames lists the statuses a --status flag takes.
func statusNames() string {
	names := make([]string, len(thread.Statuses))
	for i, st := range thread.Statuses {
		names[i] = string(st)
	}
	return strings.Join(names, ", ")
}

// printPaused says, in `thread show` and `graph show`, that run r is
// paused (since when, and what it waited for then) or will pause at its
// next boundary, and how to let it go on.
func printPaused(w io.Writer, r *spooltype.Record) {
	noun := "thread"
	if r.IsGraph() {
		noun = "graph"
	}
	if at, from, ok := orchestrator.PausedSince(r); ok {
		line := "paused     "
		if !at.IsZero() {
			line += "since " + at.UTC().Format(time.RFC3339) + " "
		}
		if from != "" {
			line += "(it was waiting for " + from + ") "
		}
		fmt.Fprintf(w, "%s: spool %s unpause %s lets it go on where it was\n", strings.TrimSuffix(line, " "), noun, r.ThreadID)
		return
	}
	if r.PauseRequested && !r.Status.Terminal() {
		fmt.Fprintf(w, "paused     requested: it pauses at its next boundary (spool %s unpause %s takes the request back)\n", noun, r.ThreadID)
	}
}
