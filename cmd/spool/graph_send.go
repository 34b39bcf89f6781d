package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/orchestrator"
)

func graphSendCommand() *cli.Command {
	return &cli.Command{
		Name:      "send",
		Usage:     "send a graph run a message, which a wait_message node of its name takes",
		ArgsUsage: "RUN NAME",
		Description: "Keeps the message for RUN, durable once the command returns: a wait_message node named NAME takes it, one\n" +
			"message a visit, oldest first, whether it came before the run reached the node or while it waits there.\n" +
			"Exits 2 when the graph waits for no message of that name or the data fails the node's schema, and 1 (run_ended)\n" +
			"when the run has ended. A message with an --id the run was sent before is not kept twice (exit 0, \"duplicate\").\n\n" +
			"Examples:\n" +
			"   spool graph send RUN deploy_finished --data '{\"ok\": true}' --id deploy-4711\n" +
			"   spool graph send RUN review_done --data @verdict.json --json",
		Flags: []cli.Flag{
			jsonFlag(),
			&cli.StringFlag{Name: "data", Usage: "the message's data as JSON, or @FILE to read it from FILE (@- for stdin); default null"},
			&cli.StringFlag{Name: "id", Usage: "an id that makes the send idempotent: the run keeps one message of each id"},
			&cli.StringFlag{Name: "by", Usage: "who sends it (default: $USER)"},
		},
		Action: graphSend,
	}
}

func graphSend(c *cli.Context) error {
	if c.NArg() != 2 {
		return usagef("graph send takes a run ID and a message name, got %d arguments", c.NArg())
	}
	id, name := c.Args().Get(0), c.Args().Get(1)
	data, err := flagText(c, "data", "JSON")
	if err != nil {
		return err
	}
	if strings.TrimSpace(data) != "" && !json.Valid([]byte(data)) {
		return usagef("--data: not JSON: %s", jsonSyntax(data))
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.orch.SendGraphMessage(c.Context, id, orchestrator.GraphMessage{Name: name, Data: json.RawMessage(data), ID: c.String("id"), By: who(c)})
	var me *orchestrator.MessageError
	switch {
	case errors.As(err, &me):
		return usagef("graph send: %s (%s)", me.Message, me.Code)
	case errors.Is(err, orchestrator.ErrNotGraph):
		return fmt.Errorf("graph send: %w", err)
	case err != nil:
		return notFound(id, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	switch {
	case res.Duplicate:
		fmt.Fprintf(c.App.Writer, "%s  message %s (id %s) was sent before as message %d; kept once\n", res.RunID, name, res.ID, res.Seq)
	case res.Woken:
		fmt.Fprintf(c.App.Writer, "%s  message %s kept (message %d); the run was waiting for it and goes on\n", res.RunID, name, res.Seq)
	default:
		fmt.Fprintf(c.App.Writer, "%s  message %s kept (message %d, run %s); a wait_message node %s takes it\n", res.RunID, name, res.Seq, res.Status, name)
	}
	return nil
}

// jsonSyntax says where text stops being JSON.
func jsonSyntax(text string) string {
	var v any
	err := json.Unmarshal([]byte(text), &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("%v (at byte %d)", se, se.Offset)
	}
	if err != nil {
		return err.Error()
	}
	return "invalid"
}
