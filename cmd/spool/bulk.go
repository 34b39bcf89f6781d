package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

// threadBulkCommand is `spool thread bulk ACTION FILTER...`: one action
// on every run a filter selects, as a durable operation
// (orchestrator.StartBulk, RunBulk).
func threadBulkCommand() *cli.Command {
	sub := func(action, usage string, extra ...cli.Flag) *cli.Command {
		return &cli.Command{Name: action, Usage: usage, Flags: append(append(bulkFlags(), extra...), listFlags()[:3]...),
			Action: func(c *cli.Context) error { return threadBulk(c, action) }}
	}
	decision := []cli.Flag{
		&cli.StringFlag{Name: "by", Usage: "who decides (default: your user name)"},
		&cli.StringFlag{Name: "reason", Usage: "why (recorded with each decision)"}}
	return &cli.Command{
		Name:  "bulk",
		Usage: "act on every run a filter selects: cancel, resume, approve or deny",
		Description: "Lists the runs the filters select that the action can act on (cancel: runs not finished; resume: runs\n" +
			"ended in error, cancelled or completed and not resumed yet; approve and deny: runs waiting for a decision),\n" +
			"then acts on each once, as a durable operation with an id: `spool bulk show ID` reports its progress, and\n" +
			"when this command dies a `spool scheduler` finishes it. --dry-run only counts. Without --yes it asks first\n" +
			"(and refuses when it cannot ask).\n\n" +
			"Examples:\n" +
			"   spool thread bulk cancel --tag batch=42 --dry-run\n" +
			"   spool thread bulk cancel --tag batch=42 --status waiting --yes --json\n" +
			"   spool thread bulk resume --directive demo/hello --status error --since 24h --yes\n" +
			"   spool thread bulk approve --tag customer=42 --reason 'reviewed' --yes",
		Subcommands: []*cli.Command{
			sub(orchestrator.BulkCancel, "cancel the runs (and their children)"),
			sub(orchestrator.BulkResume, "resume the runs: a thread with --message, a graph run from its last checkpoint",
				&cli.StringFlag{Name: "message", Usage: "the message resumed threads continue with (default: \"" + orchestrator.DefaultResumeMessage + "\")"}),
			sub(orchestrator.BulkApprove, "approve every pending call of the runs", decision...),
			sub(orchestrator.BulkDeny, "deny every pending call of the runs", decision...),
		},
	}
}

func bulkFlags() []cli.Flag {
	return []cli.Flag{
		jsonFlag(),
		&cli.StringFlag{Name: "status", Usage: "only runs in this status"},
		&cli.StringFlag{Name: "directive", Usage: "only runs of this directive (or graph)"},
		&cli.StringFlag{Name: "kind", Usage: "only graph runs (graph) or only threads (thread)"},
		tenantListFlag("runs"),
		&cli.BoolFlag{Name: "dry-run", Usage: "count the runs it would act on; change nothing"},
		&cli.BoolFlag{Name: "yes", Usage: "do not ask before acting"},
	}
}

// bulkFilter reads the bulk filters, checked (exit 2).
func bulkFilter(c *cli.Context) (orchestrator.BulkFilter, error) {
	var bf orchestrator.BulkFilter
	st := c.String("status")
	if st != "" && !thread.Status(st).Valid() {
		return bf, usagef("--status %q: want one of %s", st, statusNames())
	}
	kind := c.String("kind")
	if kind != "" && kind != "graph" && kind != "thread" {
		return bf, usagef("--kind %q: want graph or thread", kind)
	}
	tenant, err := listTenant(c)
	if err != nil {
		return bf, err
	}
	var f orchestrator.Filter
	if err := listFilter(c, &f); err != nil {
		return bf, err
	}
	return orchestrator.BulkFilter{Tags: f.Tags, Status: thread.Status(st), Directive: c.String("directive"), Kind: kind,
		Tenant: tenant, Since: f.Since, Until: f.Until}, nil
}

func threadBulk(c *cli.Context, action string) error {
	if err := noArgs(c); err != nil {
		return err
	}
	bf, err := bulkFilter(c)
	if err != nil {
		return err
	}
	req := orchestrator.BulkRequest{Action: action, Filter: bf, Message: c.String("message"), Reason: c.String("reason")}
	if action == orchestrator.BulkApprove || action == orchestrator.BulkDeny {
		req.By = who(c)
	}
	s, err := openServices(c, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	if err := askBulk(c, s, req); err != nil {
		return err
	}
	req.DryRun = c.Bool("dry-run")
	started, err := s.orch.StartBulk(c.Context, req)
	if err != nil {
		return err
	}
	if req.DryRun {
		if c.Bool("json") {
			return printJSON(c.App.Writer, map[string]int64{"matched": started.Matched})
		}
		fmt.Fprintf(c.App.Writer, "%d runs would be %s (dry run: nothing changed)\n", started.Matched, bulkPast(action))
		return nil
	}
	if !c.Bool("json") {
		fmt.Fprintf(c.App.ErrWriter, "operation %s: %d runs to %s\n", started.Operation, started.Matched, action)
	}
	op, err := s.orch.RunBulk(c.Context, started.Operation, bulkOwner(), bulkProgress(c))
	if err != nil {
		return fmt.Errorf("bulk %s %s: %w (the operation goes on in a scheduler: spool bulk show %s)", action, started.Operation, err, started.Operation)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"operation": started.Operation, "matched": started.Matched,
			"status": op.Status, "done": op.Done, "failed": op.Failed})
	}
	printBulk(c, op)
	if op.Failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("bulk %s: %d of %d runs failed", action, op.Failed, op.Matched)}
	}
	return nil
}

// askBulk, unless --dry-run or --yes, counts what req would act on and
// asks whether to (confirmBulk): nothing is made until the answer is yes.
func askBulk(c *cli.Context, s *services, req orchestrator.BulkRequest) error {
	if c.Bool("dry-run") || c.Bool("yes") {
		return nil
	}
	req.DryRun = true
	n, err := s.orch.StartBulk(c.Context, req)
	if err != nil || n.Matched == 0 {
		return err
	}
	return confirmBulk(c, req.Action, n.Matched)
}

// bulkProgress prints a running operation's progress on stderr, at most
// once a second and at the end (nothing with --json).
func bulkProgress(c *cli.Context) func(done, failed, matched int64) {
	if c.Bool("json") {
		return nil
	}
	var last time.Time
	return func(done, failed, matched int64) {
		if time.Since(last) > time.Second || done+failed == matched {
			last = time.Now()
			fmt.Fprintf(c.App.ErrWriter, "  %d of %d done, %d failed\n", done, matched, failed)
		}
	}
}

// confirmBulk asks whether to act on n runs, on a terminal; elsewhere it
// refuses (exit 2) without --yes.
func confirmBulk(c *cli.Context, action string, n int64) error {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		return usagef("bulk %s would act on %d runs: pass --yes to go ahead (or --dry-run to count only)", action, n)
	}
	fmt.Fprintf(c.App.ErrWriter, "%s %d runs? [y/N] ", action, n)
	ans, _ := bufio.NewReader(os.Stdin).ReadString('\n')
	if a := strings.ToLower(strings.TrimSpace(ans)); a != "y" && a != "yes" {
		return &exitError{code: 1, err: errors.New("bulk " + action + ": not confirmed, nothing changed")}
	}
	return nil
}

func bulkPast(action string) string {
	switch action {
	case orchestrator.BulkCancel:
		return "cancelled"
	case orchestrator.BulkResume:
		return "resumed"
	case orchestrator.BulkApprove:
		return "approved"
	}
	return "denied"
}

// bulkOwner is this process's token as the runner of an operation.
func bulkOwner() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("cli:%s:%d", host, os.Getpid())
}

func bulkCommand() *cli.Command {
	return &cli.Command{
		Name:  "bulk",
		Usage: "bulk operations (spool thread bulk)",
		Subcommands: []*cli.Command{
			{Name: "show", Usage: "an operation's progress: status, matched, done, failed and each failure", ArgsUsage: "OP_ID",
				Flags: []cli.Flag{jsonFlag()}, Action: bulkShow},
			{Name: "list", Usage: "bulk operations, newest first", Flags: []cli.Flag{jsonFlag(),
				&cli.IntFlag{Name: "limit", Value: 20, Usage: "list at most this many"}}, Action: bulkList},
		},
	}
}

func bulkShow(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("bulk show takes one operation ID, got %d arguments", c.NArg())
	}
	id := c.Args().First()
	if err := orchestrator.CheckBulkID(id); err != nil {
		return usagef("%v", err)
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	op, err := s.orch.Bulk(c.Context, id, "")
	if errors.Is(err, orchestrator.ErrBulkNotFound) {
		return &exitError{code: 1, err: fmt.Errorf("bulk operation %s not found", id)}
	}
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, op)
	}
	printBulk(c, op)
	return nil
}

func bulkList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	ops, err := s.orch.Bulks(c.Context, "", c.Int("limit"))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"operations": ops})
	}
	for _, op := range ops {
		fmt.Fprintf(c.App.Writer, "%s  %-7s  %-9s  %d/%d done  %d failed  %s\n", op.ID, op.Action, op.Status, op.Done, op.Matched, op.Failed, op.CreatedAt)
	}
	return nil
}

func printBulk(c *cli.Context, op *orchestrator.BulkOperation) {
	w := c.App.Writer
	fmt.Fprintf(w, "operation %s: %s, %s\n", op.ID, op.Action, op.Status)
	fmt.Fprintf(w, "  matched %d, done %d (%d needed nothing), failed %d\n", op.Matched, op.Done, op.Skipped, op.Failed)
	if op.Adoptions > 0 {
		fmt.Fprintf(w, "  taken over %d times from a runner that stopped\n", op.Adoptions)
	}
	ids := make([]string, 0, len(op.Failures))
	for id := range op.Failures {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		fmt.Fprintf(w, "  failed %s: %s\n", id, op.Failures[id])
	}
}
