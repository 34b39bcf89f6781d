package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/user"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
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
		{Name: "approvals", Usage: "tool calls, and graph runs' approval nodes, waiting for a decision", Flags: []cli.Flag{jsonFlag(),
			&cli.StringFlag{Name: "thread", Usage: "only the calls of this thread or run ID"}}, Action: threadApprovals},
		{Name: "approve", Usage: "approve a thread's pending tool calls (they run) or a graph run's approval node (the run goes on)", ArgsUsage: "ID", Flags: []cli.Flag{jsonFlag(),
			&cli.StringFlag{Name: "call", Usage: "only this call ID (default: every pending call of the thread or run)"},
			&cli.StringFlag{Name: "reason", Usage: "why, recorded in the transcript"}, byFlag()},
			Action: func(c *cli.Context) error { return threadDecide(c, orchestrator.DecisionApprove) }},
		{Name: "deny", Usage: "deny a thread's pending tool calls (the model gets the reason as the call's error) or a graph run's approval node (the run gets it in result.reason)",
			ArgsUsage: "ID --reason TEXT",
			Flags: []cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "call", Usage: "only this call ID (default: every pending call of the thread or run)"},
				&cli.StringFlag{Name: "reason", Usage: "why (required): " + denialGoes}, byFlag()},
			Action: func(c *cli.Context) error { return threadDecide(c, orchestrator.DecisionDeny) }},
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
		fmt.Fprintln(c.App.Writer, "nothing waits for a decision (no tool call, no graph run's approval node)")
		return nil
	}
	recs := map[string]*spooltype.Record{}
	for _, p := range calls {
		rec, seen := recs[p.ThreadID]
		if !seen {
			rec, _ = s.orch.Record(c.Context, p.ThreadID) // nil: shown as a thread's
			recs[p.ThreadID] = rec
		}
		printPendingCall(c.App.Writer, p, rec)
	}
	return nil
}

// denialGoes says where a denial's reason goes.
const denialGoes = "a thread's model gets it as the call's error; a graph run's approval node, in result.reason"

// printPendingCall prints call p of the thread or run rec (nil when it
// could not be read): a graph run's approval node as its node, its
// prompt and its show as text; a tool call as its tool and input.
func printPendingCall(w io.Writer, p orchestrator.PendingCall, rec *spooltype.Record) {
	waiting := time.Since(p.RequestedAt).Round(time.Second)
	if rec == nil || !rec.IsGraph() {
		fmt.Fprintf(w, "%s  %s  %s  waiting %s\n  input %s\n", p.ThreadID, p.CallID, p.Tool, waiting, preview(string(p.Input), 200))
		return
	}
	req, ok := orchestrator.ReadNodeRequest(p.Input)
	if p.Tool != orchestrator.GraphApprovalTool || !ok {
		fmt.Fprintf(w, "%s  step %s  tool %s at node %s  waiting %s\n  input %s\n", p.ThreadID, p.CallID, p.Tool, rec.CurrentNode, waiting,
			preview(string(p.Input), 200))
		return
	}
	fmt.Fprintf(w, "%s  approval at node %s (step %s)  waiting %s\n", p.ThreadID, rec.CurrentNode, p.CallID, waiting)
	fmt.Fprintf(w, "  asks: %s\n", indentLines(req.Prompt))
	for _, e := range req.Entries() {
		key := e.Key
		if key == "" {
			key = "shows"
		}
		text, isText := e.Value.(string)
		if !isText {
			b, _ := json.Marshal(e.Value)
			text = string(b)
		}
		fmt.Fprintf(w, "  %s: %s\n", key, preview(indentLines(text), 400))
	}
}

// indentLines indents the lines of s after its first as a field's.
func indentLines(s string) string {
	return strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n    ")
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
	if decision == orchestrator.DecisionDeny && strings.TrimSpace(c.String("reason")) == "" {
		return usagef("thread deny needs --reason TEXT (%s)", denialGoes)
	}
	s, rec, err := openRecord(c, id, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	var calls []string
	if call := c.String("call"); call != "" {
		calls = []string{call}
	} else if term, err := s.orch.ResolveChain(c.Context, id); err == nil && term != rec.ThreadID {
		// Without --call, the calls of the thread or run the chain has
		// reached are decided: word them as its.
		if cur, err := s.orch.Record(c.Context, term); err == nil {
			rec = cur
		}
	}
	res, err := s.orch.Decide(c.Context, id, calls, decision, who(c), c.String("reason"))
	if errors.Is(err, orchestrator.ErrNotPending) {
		return fmt.Errorf("%s: %w", decision, err)
	}
	if err != nil {
		return notFound(id, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	fmt.Fprintln(c.App.Writer, decidedLine(rec, res))
	return nil
}

// decidedLine says what decision res of the calls of thread or run rec
// (its record before the decision) did: "ID  approved call_1; the thread
// goes on", "RUN  approved at node signoff; the run goes on".
func decidedLine(rec *spooltype.Record, res *orchestrator.DecideResult) string {
	verb := map[string]string{orchestrator.DecisionApprove: "approved", orchestrator.DecisionDeny: "denied"}[res.Decision]
	if !rec.IsGraph() {
		line := fmt.Sprintf("%s  %s %s", res.ThreadID, verb, strings.Join(res.Calls, ", "))
		if res.Woken {
			return line + "; the thread goes on"
		}
		return line + "; other calls still wait for a decision"
	}
	var what []string
	node := false
	for _, call := range res.Calls {
		switch tool := pendingTool(rec, call); tool {
		case orchestrator.GraphApprovalTool:
			what, node = append(what, "at node "+rec.CurrentNode), true
		case "":
			what = append(what, "step "+call)
		default:
			what = append(what, fmt.Sprintf("tool %s at node %s (step %s)", tool, rec.CurrentNode, call))
		}
	}
	line := fmt.Sprintf("%s  %s %s", res.ThreadID, verb, strings.Join(what, ", "))
	switch {
	case !res.Woken:
		return line + "; the run still waits for its other decisions"
	case res.Decision == orchestrator.DecisionApprove:
		return line + "; the run goes on"
	case node:
		return line + "; the run goes on, routing on the denial (its reason in result.reason)"
	}
	return line + "; the step fails with approval_denied and the reason"
}

// pendingTool is the tool of rec's pending call call, "" when none
// waits under that id.
func pendingTool(rec *spooltype.Record, call string) string {
	for _, p := range rec.PendingApprovals {
		if p.CallID == call {
			return p.Tool
		}
	}
	return ""
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
	if errors.Is(err, orchestrator.ErrFinished) {
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
