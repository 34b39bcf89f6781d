package main

import (
	"errors"
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
)

func graphReplayCommand() *cli.Command {
	return &cli.Command{
		Name:      "replay",
		Usage:     "walk a graph against a run's recorded step results, running nothing: did every step take the recorded edge?",
		ArgsUsage: "RUN",
		Description: "Walks the graph (by default the project's file of the run's graph as it is now; --graph another file, --pinned\n" +
			"the version the run ran) against the results RUN's transcript recorded: each result goes through the node's\n" +
			"assign and next, and the edge taken, the keys assigned and a return node's output must be the run's. Nothing\n" +
			"runs and nothing is written. Exits 0 when every step went the recorded way, 1 naming the first step that did not\n" +
			"(or where the replay had to stop), 2 when the graph does not parse.\n\n" +
			"Examples:\n" +
			"   spool graph replay RUN\n" +
			"   spool graph replay RUN --graph ./review-v2.yaml --json",
		Flags: []cli.Flag{
			jsonFlag(),
			&cli.StringFlag{Name: "graph", Usage: "replay against this graph file or name instead of the project's file of the run's graph"},
			&cli.BoolFlag{Name: "pinned", Usage: "replay against the version of the graph the run ran"},
		},
		Action: graphReplay,
	}
}

func graphReplay(c *cli.Context) error {
	s, rec, err := openGraphRun(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	var g *graph.Graph
	against := ""
	if !c.Bool("pinned") {
		arg := c.String("graph")
		if arg == "" {
			arg = rec.Directive
		}
		res, parsed := validateGraphArg(c, arg, toolChecks{})
		if !res.OK {
			return usagef("graph replay: %s does not validate: %s", arg, res.Errors[0])
		}
		g, against = parsed, arg
	}
	r, err := s.orch.ReplayGraph(c.Context, rec.ThreadID, g, against)
	if errors.Is(err, orchestrator.ErrNotReplayable) {
		return usagef("graph replay: %v", err)
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, r); err != nil {
			return err
		}
	}
	switch {
	case r.Divergence != nil:
		return &exitError{code: 1, err: fmt.Errorf("%s: step %d (node %s) goes another way against %s: %s", r.RunID, r.Divergence.Step, r.Divergence.Node, r.Against, r.Divergence.Message)}
	case r.Stopped != nil:
		return &exitError{code: 1, err: fmt.Errorf("%s: replay stopped at step %d (node %s) against %s: %s", r.RunID, r.Stopped.Step, r.Stopped.Node, r.Against, r.Stopped.Message)}
	}
	if !c.Bool("json") {
		fmt.Fprintf(c.App.Writer, "%s  replayed %d of %d recorded steps against %s: every step took the recorded edge\n", r.RunID, r.Steps, r.Recorded, r.Against)
	}
	return nil
}
