package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/orchestrator"
)

// queueCommand is `spool queue list | pause Q | unpause Q`: the asynq
// queues of the namespace's activations, held and let go as a whole.
func queueCommand() *cli.Command {
	return &cli.Command{
		Name:  "queue",
		Usage: "the queues runs' activations wait in: list, pause, unpause",
		Subcommands: []*cli.Command{
			{Name: "list", Usage: "each queue's tasks (pending, active, scheduled, retry, archived) and whether it is paused",
				Flags: []cli.Flag{jsonFlag()}, Action: queueList},
			{Name: "pause", Usage: "stop workers taking the queue's activations (running ones finish theirs; the rest wait queued)",
				ArgsUsage: "QUEUE", Action: func(c *cli.Context) error { return queuePause(c, true) }},
			{Name: "unpause", Usage: "let workers take the queue's activations again", ArgsUsage: "QUEUE",
				Action: func(c *cli.Context) error { return queuePause(c, false) }},
		},
	}
}

func queueList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	qs, err := s.orch.Queues(c.Context)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"queues": qs})
	}
	if len(qs) == 0 {
		fmt.Fprintln(c.App.Writer, "no queues yet (a queue exists once a run was queued to it)")
		return nil
	}
	for _, q := range qs {
		state := "running"
		if q.Paused {
			state = "paused"
		}
		fmt.Fprintf(c.App.Writer, "%-12s %-8s pending %d, active %d, scheduled %d, retry %d, archived %d\n",
			q.Name, state, q.Pending, q.Active, q.Scheduled, q.Retry, q.Archived)
	}
	return nil
}

func queuePause(c *cli.Context, pause bool) error {
	verb := map[bool]string{true: "pause", false: "unpause"}[pause]
	if c.NArg() != 1 {
		return usagef("queue %s takes one queue name, got %d arguments", verb, c.NArg())
	}
	q := c.Args().First()
	if err := orchestrator.CheckQueueName(q); err != nil {
		return usagef("%v", err)
	}
	s, err := openServices(c, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.orch.PauseQueue(c.Context, q, pause); err != nil {
		return err
	}
	fmt.Fprintf(c.App.Writer, "queue %s %sd\n", q, verb)
	return nil
}
