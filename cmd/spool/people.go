package main

import (
	"errors"
	"fmt"
	"os/user"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/registry"
)

// People in the loop (CLI.md): approvals, approve, deny, send, interrupt.

func byFlag() cli.Flag {
	return &cli.StringFlag{Name: "by", EnvVars: []string{"SPOOL_BY"}, Usage: "who decides or sends, recorded in the transcript (default: the OS user)"}
}

// who is --by, else the OS user's name.
func who(c *cli.Context) string {
	if b := strings.TrimSpace(c.String("by")); b != "" {
		return b
	}
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return "unknown"
}

func peopleCommands() []*cli.Command {
	return []*cli.Command{
		{Name: "approvals", Usage: "tool calls waiting for a decision", Flags: []cli.Flag{jsonFlag(),
			&cli.StringFlag{Name: "thread", Usage: "only the calls of this thread ID"}}, Action: threadApprovals},
		{Name: "approve", Usage: "approve a thread's pending tool calls: they run", ArgsUsage: "ID", Flags: []cli.Flag{jsonFlag(),
			&cli.StringFlag{Name: "call", Usage: "only this call ID (default: every pending call of the thread)"},
			&cli.StringFlag{Name: "reason", Usage: "why, recorded in the transcript"}, byFlag()},
			Action: func(c *cli.Context) error { return threadDecide(c, registry.DecisionApprove) }},
		{Name: "deny", Usage: "deny a thread's pending tool calls: the model gets the reason as the call's error", ArgsUsage: "ID --reason TEXT",
			Flags: []cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "call", Usage: "only this call ID (default: every pending call of the thread)"},
				&cli.StringFlag{Name: "reason", Usage: "why, given to the model (required)"}, byFlag()},
			Action: func(c *cli.Context) error { return threadDecide(c, registry.DecisionDeny) }},
		{Name: "send", Usage: "queue a message the model sees before its next call", ArgsUsage: "ID --message TEXT",
			Flags:  []cli.Flag{jsonFlag(), &cli.StringFlag{Name: "message", Usage: "the message (required)"}, byFlag()},
			Action: func(c *cli.Context) error { return threadSend(c, false) }},
		{Name: "interrupt", Usage: "stop the model call or tool in flight, then deliver a message", ArgsUsage: "ID --message TEXT",
			Flags:  []cli.Flag{jsonFlag(), &cli.StringFlag{Name: "message", Usage: "the message (required)"}, byFlag()},
			Action: func(c *cli.Context) error { return threadSend(c, true) }},
	}
}

func threadApprovals(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("thread approvals takes no arguments (use --thread ID)")
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	id := c.String("thread")
	if id != "" {
		if _, err := s.orch.Record(c.Context, id); err != nil {
			return notFound(id, err)
		}
	}
	calls, err := s.orch.Approvals(c.Context, id)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, calls)
	}
	if len(calls) == 0 {
		fmt.Fprintln(c.App.Writer, "no tool call is waiting for a decision")
		return nil
	}
	for _, p := range calls {
		fmt.Fprintf(c.App.Writer, "%s  %s  %s  waiting %s\n  input %s\n", p.ThreadID, p.CallID, p.Tool,
			time.Since(p.RequestedAt).Round(time.Second), preview(string(p.Input), 200))
	}
	return nil
}

func preview(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

func threadDecide(c *cli.Context, decision string) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	if decision == registry.DecisionDeny && strings.TrimSpace(c.String("reason")) == "" {
		return usagef("thread deny needs --reason TEXT (the model gets it as the call's error)")
	}
	s, _, err := openRecord(c, id, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	var calls []string
	if call := c.String("call"); call != "" {
		calls = []string{call}
	}
	res, err := s.orch.Decide(c.Context, id, calls, decision, who(c), c.String("reason"))
	if errors.Is(err, registry.ErrNotPending) {
		return fmt.Errorf("%s: %w", decision, err)
	}
	if err != nil {
		return notFound(id, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	verb := map[string]string{registry.DecisionApprove: "approved", registry.DecisionDeny: "denied"}[decision]
	fmt.Fprintf(c.App.Writer, "%s  %s %s", res.ThreadID, verb, strings.Join(res.Calls, ", "))
	if res.Woken {
		fmt.Fprint(c.App.Writer, "; the thread goes on")
	} else {
		fmt.Fprint(c.App.Writer, "; other calls still wait for a decision")
	}
	fmt.Fprintln(c.App.Writer)
	return nil
}

func threadSend(c *cli.Context, interrupt bool) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	msg := c.String("message")
	if strings.TrimSpace(msg) == "" {
		return usagef("thread %s needs --message TEXT", c.Command.Name)
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.orch.Send(c.Context, id, msg, who(c), interrupt)
	if errors.Is(err, registry.ErrFinished) {
		return fmt.Errorf("%s: %w (send and interrupt need a running or waiting thread; `spool thread resume` continues a finished one)", c.Command.Name, err)
	}
	if err != nil {
		return notFound(id, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	how := "the model sees it before its next call"
	if interrupt {
		how = "the work in flight stops; the model sees it next"
	}
	fmt.Fprintf(c.App.Writer, "%s  message %d queued (%s): %s\n", res.ThreadID, res.Seq, res.Status, how)
	return nil
}
