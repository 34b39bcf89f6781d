package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spawn"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/stack"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// jsonFlag is the --json flag, new for each command: urfave/cli writes
// into a flag when it parses one, so commands (and tests that build the
// app at once) share no flag value.
func jsonFlag() *cli.BoolFlag { return &cli.BoolFlag{Name: "json", Usage: "print JSON"} }

func threadCommand() *cli.Command {
	return &cli.Command{
		Name:  "thread",
		Usage: "run and inspect threads",
		Subcommands: append([]*cli.Command{
			threadRunCommand(),
			{Name: "list", Usage: "list threads, newest first", Flags: append([]cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "status", Usage: "only threads in this status: created, running, waiting, paused, completed, error, cancelled or continued"},
				&cli.StringFlag{Name: "directive", Usage: "only threads of this directive (e.g. demo/hello)"},
				&cli.StringFlag{Name: "parent", Usage: "only the children of this thread ID"},
				tenantListFlag("threads"),
				&cli.StringFlag{Name: "waiting-for", Usage: "only waiting threads that wait for this: children, approval, rate_limit, retry, sleep, capacity, concurrency, tenant_concurrency, tenant_budget, tenant_rate or tenant_runs"},
				&cli.IntFlag{Name: "limit", Value: 100, Usage: "list at most this many threads"}}, listFlags()...), Action: threadList},
			{Name: "show", Usage: "registry record, cost, limits and outputs", ArgsUsage: "ID", Flags: []cli.Flag{jsonFlag()}, Action: threadShow},
			{Name: "tree", Usage: "children and continuations with status and spend", ArgsUsage: "ID", Flags: []cli.Flag{jsonFlag()}, Action: threadTree},
			{Name: "chain", Usage: "continuation chain, root first", ArgsUsage: "ID", Flags: []cli.Flag{jsonFlag()}, Action: threadChain},
			{Name: "wait", Usage: "wait for threads (following continuation chains)", ArgsUsage: "ID...", Flags: []cli.Flag{jsonFlag(),
				&cli.DurationFlag{Name: "timeout", Value: 600 * time.Second, Usage: "give up after this long (exit 1; the threads keep running); 0 waits without a limit"}}, Action: threadWait},
			{Name: "cancel", Usage: "cancel a thread", ArgsUsage: "ID", Flags: []cli.Flag{jsonFlag(),
				&cli.BoolFlag{Name: "cascade", Value: true, Usage: "cancel its children too"}}, Action: threadCancel},
			{Name: "resume", Usage: "resume a finished thread with a message", ArgsUsage: "ID --message TEXT", Flags: []cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "message", Usage: "the user message the thread resumes with (required)"},
				&cli.BoolFlag{Name: "wait", Usage: "wait for the new thread (and its continuations) to finish and print its record (exit 1 unless it completed)"},
				&cli.BoolFlag{Name: "follow", Usage: "with --wait, show a live view while it runs"},
				&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "how long --wait waits (exit 1 after it; the thread keeps running); 0 waits without a limit"}}, Action: threadResume},
			{Name: "transcript", Usage: "print a thread's transcript", ArgsUsage: "ID", Flags: []cli.Flag{
				&cli.BoolFlag{Name: "json", Usage: "print JSON lines, one event a line (--format jsonl)"},
				&cli.BoolFlag{Name: "follow", Usage: "keep printing as the thread runs"},
				&cli.StringFlag{Name: "format", Value: "text", Usage: "jsonl, text or markdown"},
				&cli.BoolFlag{Name: "lenient", Usage: "a transcript that fails verification: print its intact prefix, warn, exit 0"}}, Action: threadTranscript},
			{Name: "search", Usage: "regex over the transcripts of a whole chain", ArgsUsage: "ID --query REGEX", Flags: []cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "query", Usage: "Go regular expression (required)"},
				&cli.IntFlag{Name: "max", Value: 50, Usage: "print at most this many matches"}}, Action: threadSearch},
			{Name: "verify", Usage: "verify every signature and hash of a transcript", ArgsUsage: "ID", Flags: []cli.Flag{jsonFlag()}, Action: threadVerify},
			threadBulkCommand(),
		}, append(append(peopleCommands(), historyCommands()...), pauseCommands("ID")...)...),
	}
}

func threadRunCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "start a thread running a directive",
		ArgsUsage: "DIRECTIVE",
		Description: "Starts a thread and prints its ID, or with --wait its final record (exit 1 when it did not complete).\n" +
			"The model is --model, else the directive's, else its tier's in .ai/config/agent/models.yaml; an unknown or\n" +
			"unpriced model, an undeclared or missing input and a bad limit are refused (exit 2) before anything starts.\n" +
			"Workers hold the provider keys (ANTHROPIC_API_KEY, OPENAI_API_KEY), not this command: it warns when the\n" +
			"model's key is not set here, and a worker without it fails the thread at once (provider_auth).\n" +
			"Ctrl-C while it waits leaves the thread running (exit 1): follow it with `spool thread wait ID`.\n\n" +
			"Examples:\n" +
			"   spool thread run demo/hello --embedded --wait                 # everything in this process, nothing installed\n" +
			"   spool thread run demo/hello --input name=Ada --wait --follow  # on `spool dev` or workers, with a live view\n" +
			"   spool thread run demo/tree --inputs-json '{\"level\": 0, \"depth\": 3}' --json\n" +
			"   spool thread run demo/hello --inputs-json @inputs.json --limit spend=0.5 --limit turns=10\n" +
			"   spool thread run demo/hello --model script:scripts/demo.yaml --wait --timeout 2m\n" +
			"   spool thread run --project examples demo/hello --embedded --wait   # global flags go anywhere",
		Flags: append([]cli.Flag{
			jsonFlag(),
			&cli.StringSliceFlag{Name: "input", Usage: "input k=v (repeatable); a directive that declares inputs takes only those"},
			&cli.StringFlag{Name: "inputs-json", Usage: "inputs as a JSON object, or @FILE to read it from FILE (@- for stdin)"},
			&cli.StringFlag{Name: "model", Usage: "model id, or script:PATH for the scripted provider"},
			&cli.StringSliceFlag{Name: "limit", Usage: "limit override k=v: turns, tokens, spend, depth, spawns, duration"},
		}, runFlags("thread", 4)...),
		Action: threadRun,
	}
}

// parseInputs reads --inputs-json (or the file it names as @FILE, @- for
// stdin: a command-line argument holds at most 128 KiB) then --input k=v
// (which win).
func parseInputs(c *cli.Context) (map[string]any, error) {
	in := map[string]any{}
	raw, err := flagText(c, "inputs-json", "a JSON object")
	if err != nil {
		return nil, err
	}
	if raw != "" {
		if in, err = decodeInputsJSON(raw); err != nil {
			return nil, usagef("--inputs-json: not a JSON object: %v", err)
		}
		if in == nil { // "null"
			return nil, usagef("--inputs-json: not a JSON object: null")
		}
	}
	for _, kv := range c.StringSlice("input") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--input %q: want key=value", kv)
		}
		in[k] = v
	}
	if err := thread.CheckInputs(in); err != nil {
		return nil, usagef("%v", err)
	}
	return in, nil
}

// readInputs reads --inputs-json's file, refusing one past
// thread.MaxInputsBytes without reading more of it.
func readInputs(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, thread.MaxInputsBytes+1))
	if err == nil && len(b) > thread.MaxInputsBytes {
		return nil, fmt.Errorf("over %d bytes (1 MiB), the most a thread's inputs hold: %w", thread.MaxInputsBytes, thread.ErrInputsTooLarge)
	}
	return b, err
}

// decodeInputsJSON decodes --inputs-json keeping each number as written
// (json.Number), so that the directive's declared types check it as they
// check --input's text: 1e400 for a number is "want a number", not a
// decoding error, and 12345678901234567890 for a string keeps its digits.
func decodeInputsJSON(raw string) (map[string]any, error) {
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var in map[string]any
	if err := dec.Decode(&in); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("more after the object")
	}
	return in, nil
}

// parseLimits reads --limit k=v overrides.
func parseLimits(c *cli.Context) (thread.Limits, error) {
	var l thread.Limits
	for _, kv := range c.StringSlice("limit") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return l, usagef("--limit %q: want name=value", kv)
		}
		if err := l.SetLimit(k, v); err != nil {
			return l, usagef("--limit %s: %v", kv, err)
		}
		if l.Spend != nil && *l.Spend > orchestrator.MaxAmount {
			return l, usagef("--limit %s: at most %g USD (the most one budget holds)", kv, float64(orchestrator.MaxAmount))
		}
	}
	return l, nil
}

// checkTimeout refuses a negative --timeout (0 waits without a limit).
func checkTimeout(c *cli.Context) error {
	if d := c.Duration("timeout"); d < 0 {
		return usagef("--timeout %s: must not be negative (0 waits without a limit)", d)
	}
	return nil
}

func threadRun(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("thread run takes one DIRECTIVE argument")
	}
	name := strings.TrimSuffix(c.Args().First(), ".md")
	if err := checkTimeout(c); err != nil {
		return err
	}
	inputs, err := parseInputs(c)
	if err != nil {
		return err
	}
	limits, err := parseLimits(c)
	if err != nil {
		return err
	}
	adm, err := tenantFlags(c)
	if err != nil {
		return err
	}
	if q := c.String("queue"); c.IsSet("queue") {
		if err := orchestrator.CheckQueueName(q); err != nil {
			return usagef("--queue: %v", err)
		}
	}
	if cl := spawn.FromEnv(); cl != nil {
		// The child's bundle (scripts included) is its parent's, on the
		// worker: nothing of this process's disk is read.
		return runChildOfTool(c, cl, name, inputs)
	}
	proj, err := existingProject(c)
	if err != nil {
		return err
	}
	// A script outside the project is refused before anything is opened,
	// also for a child (--parent), whose bundle is its parent's.
	if err := launch.CheckScript(proj, c.String("model")); err != nil {
		return &usageError{msg: err.Error()}
	}
	return startAndWait(c, func(s *services, log *slog.Logger) (*launch.Started, error) {
		req := orchestrator.StartRequest{Directive: name, Inputs: inputs, Model: c.String("model"), LimitOverrides: limits,
			ParentID: c.String("parent"), Queue: c.String("queue"), TraceParent: envTraceParent()}
		adm.apply(&req)
		started, err := launch.Start(c.Context, s.orch, launch.Request{Project: s.project, UserDir: s.userDir, Logger: log, StartRequest: req})
		if errors.Is(err, launch.ErrRefused) {
			return nil, &usageError{msg: err.Error()}
		}
		if err != nil {
			return nil, directiveNotFound(c, s, err)
		}
		return started, nil
	})
}

func errSuffix(r *spooltype.Record) string {
	if r.Error == nil {
		return ""
	}
	return ": " + r.Error.Line()
}

func printRecord(w io.Writer, r *spooltype.Record) {
	fmt.Fprintf(w, "thread     %s\n", r.ThreadID)
	fmt.Fprintf(w, "directive  %s\n", r.Directive)
	fmt.Fprintf(w, "status     %s\n", r.Status)
	if r.Stalled != nil && !r.Status.Terminal() {
		fmt.Fprintf(w, "stalled    %s\n", r.Stalled.Line(time.Now()))
	}
	if r.ParentID != "" {
		fmt.Fprintf(w, "parent     %s\n", r.ParentID)
	}
	if r.ContinuationOf != "" || r.ContinuationThreadID != "" {
		fmt.Fprintf(w, "chain      root %s, continues %s, continued by %s\n", r.ChainRootID, dash(r.ContinuationOf), dash(r.ContinuationThreadID))
	}
	if r.ForkedFrom != "" {
		fmt.Fprintf(w, "fork of    %s at turn %d\n", r.ForkedFrom, r.ForkTurn)
	}
	if len(r.DroppedCapabilities) > 0 {
		fmt.Fprintf(w, "warning    runs without %s: its parent does not hold them\n", strings.Join(r.DroppedCapabilities, ", "))
	}
	fmt.Fprintf(w, "model      %s\n", r.Model)
	printTenant(w, r)
	printPaused(w, r)
	if r.TraceID != "" {
		fmt.Fprintf(w, "trace      %s\n", r.TraceID)
	}
	fmt.Fprintf(w, "cost       %s · %d in / %s · $%.6f\n", thread.Count(r.Cost.Turns, "turn", "turns"), r.Cost.InputTokens,
		thread.Count(r.Cost.OutputTokens, "out token", "out tokens"), r.Cost.Spend)
	fmt.Fprintf(w, "limits     %s\n", limitsLine(r.Limits))
	if r.Error != nil {
		fmt.Fprintf(w, "error      %s\n", r.Error.Line())
	}
	if len(r.Outputs) > 0 {
		b, _ := json.Marshal(r.Outputs)
		fmt.Fprintf(w, "outputs    %s\n", b)
	}
	if r.Result != "" {
		fmt.Fprintf(w, "result     %s\n", r.Result)
	}
}

// limitsLine is a thread's limits as `thread show` prints them, each
// count only when it bounds something: "turns 25 · tokens 200000 · spend
// $1.0000 · depth 10 · spawns 10 · duration 600s".
func limitsLine(l thread.Resolved) string {
	var parts []string
	count := func(name string, n int) {
		if thread.Bounded(n) {
			parts = append(parts, fmt.Sprintf("%s %d", name, n))
		}
	}
	count("turns", l.Turns)
	count("tokens", l.Tokens)
	parts = append(parts, fmt.Sprintf("spend $%.4f", l.Spend))
	count("depth", l.Depth)
	count("spawns", l.Spawns)
	parts = append(parts, fmt.Sprintf("duration %gs", l.Duration))
	return strings.Join(parts, " · ")
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// flagText is the text of flag: as written, or the content of the file
// it names as @FILE (@- for stdin). want says what the flag holds, for
// the error of an empty file.
func flagText(c *cli.Context, flag, want string) (string, error) {
	raw := c.String(flag)
	name, ok := strings.CutPrefix(raw, "@")
	if !ok {
		return raw, nil
	}
	var b []byte
	var err error
	if name == "-" {
		b, err = readInputs(c.App.Reader)
	} else {
		var f *os.File
		if f, err = os.Open(name); err == nil {
			b, err = readInputs(f)
			f.Close()
		}
	}
	var pe *fs.PathError
	if errors.As(err, &pe) {
		err = pe.Err // the path is in the message already
	}
	if err != nil {
		return "", usagef("--%s @%s: %v", flag, name, err)
	}
	if strings.TrimSpace(string(b)) == "" {
		return "", usagef("--%s @%s: empty, want %s", flag, name, want)
	}
	return string(b), nil
}

func oneID(c *cli.Context) (string, error) {
	if c.NArg() != 1 {
		return "", usagef("%s takes one thread ID, got %d arguments", commandPath(c), c.NArg())
	}
	return c.Args().First(), nil
}

// openID reads the one thread ID of c and opens the services as o says;
// the caller closes them.
func openID(c *cli.Context, o openOpts) (string, *services, error) {
	id, err := oneID(c)
	if err != nil {
		return "", nil, err
	}
	s, err := openServices(c, o)
	if err != nil {
		return "", nil, err
	}
	return id, s, nil
}

// openThread is openID, read-only, and the thread's record (an unknown ID
// is "not found"); the caller closes the services.
func openThread(c *cli.Context) (*services, *spooltype.Record, error) {
	id, err := oneID(c)
	if err != nil {
		return nil, nil, err
	}
	return openRecord(c, id, openOpts{readOnly: true})
}

// openRecord opens the services as o says and reads thread id's record
// (an unknown ID is "not found"); the caller closes the services.
func openRecord(c *cli.Context, id string, o openOpts) (*services, *spooltype.Record, error) {
	s, err := openServices(c, o)
	if err != nil {
		return nil, nil, err
	}
	rec, err := s.orch.Record(c.Context, id)
	if err != nil {
		s.Close()
		return nil, nil, notFound(id, err)
	}
	return s, rec, nil
}

// waitError says why waiting for ids failed: an interrupt (Ctrl-C), the
// --timeout (naming the threads not finished), or something else.
func waitError(c *cli.Context, s *services, ids []string, err error) error {
	if c.Err() != nil {
		return interrupted(c, s, ids)
	}
	what := waited(c, s, ids)
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("wait for %s: %w", what, err)
	}
	if len(ids) > 1 {
		if open, err := unfinished(c, s, ids); err == nil && len(open) > 0 {
			what = fmt.Sprintf("%d of %d threads", len(open), len(ids))
			if len(open) > 5 {
				open = append(open[:5], "…")
			}
			return fmt.Errorf("%s not finished after --timeout %s: %s", what, c.Duration("timeout"), strings.Join(open, ", "))
		}
	}
	return fmt.Errorf("%s not finished after --timeout %s%s", what, c.Duration("timeout"), waitingHint(c, s, ids[0]))
}

// unfinished returns the ids whose chain has not ended.
func unfinished(c *cli.Context, s *services, ids []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(c.Context, 5*time.Second)
	defer cancel()
	var open []string
	for _, id := range ids {
		r, err := s.orch.Latest(ctx, id)
		if err != nil {
			return nil, err
		}
		if !r.Status.Terminal() {
			open = append(open, id)
		}
	}
	return open, nil
}

// nothingRuns refuses to wait for unfinished threads on the data dir's
// embedded Redis that this command opened (no Redis configured, no spool
// dev running): no worker runs there, and none can start while this
// process holds it, so the wait could only time out.
func nothingRuns(c *cli.Context, s *services, ids []string) error {
	if s.embedded == nil {
		return nil
	}
	open, err := unfinished(c, s, ids)
	if err != nil || len(open) == 0 {
		return err
	}
	return noWorker(s, strings.Join(open, ", "), "wait (or follow)")
}

// noWorker says that what is not finished and that nothing runs it on the
// data dir's embedded Redis this command opened, so that the user can do
// again after starting a worker there.
func noWorker(s *services, what, again string) error {
	return fmt.Errorf("%s not finished, and no worker runs on %s: start `spool dev` there, then %s again", what, s.dataDir, again)
}

// interrupted says what becomes of threads whose wait was interrupted:
// they keep running on the workers; an --embedded run's thread stopped
// with this process's worker and resumes when a worker runs on its Redis.
// The exit code stays 1, a failed operation (the wait).
func interrupted(c *cli.Context, s *services, ids []string) error {
	what, follow := waited(c, s, ids), "`spool thread wait "+strings.Join(ids, " ")+"`"
	switch {
	case !c.Bool("embedded") || s.joinedDev:
		return fmt.Errorf("interrupted: %s keeps running; follow it with %s", what, follow)
	case s.embedded == nil: // --embedded on a configured Redis
		return fmt.Errorf("interrupted: %s stopped with this process's worker and resumes when a worker (spool worker or spool dev) runs on %s; then follow it with %s",
			what, stack.RedactURL(c.String("redis-url")), follow)
	case s.embedded.Persistent:
		return fmt.Errorf("interrupted: %s is saved in %s and resumes when `spool dev` starts on that data directory; then follow it with %s",
			what, s.dataDir, follow)
	default:
		return fmt.Errorf("interrupted: %s is lost: with no redis-server on PATH, the embedded Redis kept nothing", what)
	}
}

func threadList(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	st := c.String("status")
	if st != "" && !thread.Status(st).Valid() {
		return usagef("--status %q: want one of %s", st, statusNames())
	}
	tenant, err := listTenant(c)
	if err != nil {
		return err
	}
	waitingFor, err := waitingForFlag(c)
	if err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	if p := c.String("parent"); p != "" {
		// An unknown parent is a mistyped id, not a thread without children.
		if _, err := s.orch.Record(c.Context, p); err != nil {
			return notFound(p, err)
		}
	}
	f := orchestrator.Filter{Status: thread.Status(st), Directive: c.String("directive"), Parent: c.String("parent"),
		Tenant: tenant, WaitingFor: waitingFor, Limit: c.Int("limit")}
	if err := listFilter(c, &f); err != nil {
		return err
	}
	recs, next, err := listPage(c, s, f, "threads")
	if err != nil {
		return err
	}
	return printThreads(c, recs, next)
}

// listPage is a page of the runs f selects, each with its spend (a graph
// run's: its subtree's, as graph show gives it), and the cursor of the
// next page; a page that stops at --limit says so on stderr, with the
// flag that reads on.
func listPage(c *cli.Context, s *services, f orchestrator.Filter, what string) ([]*spooltype.Record, string, error) {
	recs, next, err := s.orch.ThreadsPage(c.Context, f)
	if err != nil {
		return nil, "", err
	}
	if next != "" {
		fmt.Fprintf(c.App.ErrWriter, "spool: showing the newest %d %s, the limit; there are more: the next page is --cursor %s (or raise --limit, 0 lists all)\n", f.Limit, what, next)
	}
	for _, r := range recs {
		r.Cost.Spend = s.orch.RunSpend(c.Context, r)
	}
	if recs == nil {
		recs = []*spooltype.Record{}
	}
	return recs, next, nil
}

// runPage is a listing's --json: the page's runs under key, and the
// cursor of the next page (absent after the last).
func runPage(key string, recs []*spooltype.Record, next string) map[string]any {
	out := map[string]any{key: recs}
	if next != "" {
		out["next_cursor"] = next
	}
	return out
}

// printThreads prints `thread list`'s records: --json {"threads": [...],
// "next_cursor": C} (no cursor after the last page), else a table of the
// id, status, progress and spend of each.
func printThreads(c *cli.Context, recs []*spooltype.Record, next string) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, runPage("threads", recs, next))
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tPROGRESS\tSPEND")
	for _, r := range recs {
		progress := thread.Count(r.Cost.Turns, "turn", "turns")
		if r.IsGraph() {
			progress = "graph, " + thread.Count(r.Step, "step", "steps")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t$%.6f\n", r.ThreadID, r.Status, progress, r.Cost.Spend)
	}
	return tw.Flush()
}

func threadShow(c *cli.Context) error {
	s, r, err := openThread(c)
	if err != nil {
		return err
	}
	defer s.Close()
	unserved := unservedQueue(c, s, r)
	if c.Bool("json") {
		if unserved != "" {
			fmt.Fprintf(c.App.ErrWriter, "spool: warning: thread %s waits: %s\n", r.ThreadID, unserved)
		}
		return printJSON(c.App.Writer, r)
	}
	if r.IsGraph() {
		// A graph run has no model or turns: its steps, node and what it
		// waits for, as graph show heads its table.
		printGraphRecord(c.Context, c.App.Writer, s, r)
		fmt.Fprintf(c.App.Writer, "limits     %s\n", limitsLine(r.Limits))
	} else {
		printRecord(c.App.Writer, r)
		printAwaiting(c.Context, c.App.Writer, s, r)
	}
	if line := s.orch.AdmissionWaitLine(c.Context, r); line != "" {
		fmt.Fprintf(c.App.Writer, "waiting    %s\n", line)
	}
	if unserved != "" {
		fmt.Fprintf(c.App.Writer, "queue      %s\n", unserved)
	}
	return nil
}

// unservedQueue says, for a thread that waits to be taken by a worker
// (created, or waiting to be woken), that no running worker serves its
// queue; "" when one does, or when that cannot be told.
func unservedQueue(c *cli.Context, s *services, r *spooltype.Record) string {
	if r.Status != thread.StatusCreated && r.Status != thread.StatusWaiting {
		return ""
	}
	qs, err := s.orch.QueueServed(c.Context, r.Queue)
	if err != nil {
		s.log.Debug("queue service", "queue", r.Queue, "error", err)
		return ""
	}
	if qs.Served {
		return ""
	}
	return qs.String()
}

// notFound is a orchestrator.ErrNotFound of thread id as the user reads it:
// `thread "ID" not found`, and where (threadNotFound).
func notFound(id string, err error) error {
	if errors.Is(err, orchestrator.ErrNotFound) {
		return &threadNotFound{id: id}
	}
	return err
}

// printTree prints n on a line starting with first, and what hangs under
// it (children, then forks marked ⑂, then the continuation marked ↳) on
// lines starting with rest and the tree's branches.
func printTree(w io.Writer, n *orchestrator.TreeNode, first, rest string) {
	if n.Kind == spooltype.KindGraph {
		// A graph run: its kind and cursor instead of turns, and its
		// subtree's spend (its children's: it calls no model itself).
		fmt.Fprintf(w, "%s%s  %s  graph  %s", first, n.ThreadID, n.Status, thread.Count(n.Step, "step", "steps"))
		if n.CurrentNode != "" {
			fmt.Fprintf(w, "  at %s", n.CurrentNode)
		}
		if n.Subtree != nil {
			fmt.Fprintf(w, "  $%.6f of $%.6f with its children", n.Subtree.Spent, n.Subtree.Max)
		} else {
			fmt.Fprintf(w, "  $%.6f", n.Spend)
		}
	} else {
		fmt.Fprintf(w, "%s%s  %s  %s  $%.6f", first, n.ThreadID, n.Status, thread.Count(n.Turns, "turn", "turns"), n.Spend)
		if n.Subtree != nil {
			fmt.Fprintf(w, "  subtree $%.6f of $%.6f", n.Subtree.Spent, n.Subtree.Max)
		}
	}
	if n.ForkedFrom != "" {
		unit := "turn"
		if n.Kind == spooltype.KindGraph {
			unit = "step"
		}
		fmt.Fprintf(w, "  fork of %s at %s %d", n.ForkedFrom, unit, n.ForkTurn)
	}
	if len(n.DroppedCapabilities) > 0 {
		fmt.Fprintf(w, "  ⚠ runs without %s: its parent does not hold them", strings.Join(n.DroppedCapabilities, ", "))
	}
	fmt.Fprintln(w)
	type edge struct {
		n    *orchestrator.TreeNode
		mark string
	}
	var under []edge
	for _, k := range n.Children {
		under = append(under, edge{k, ""})
	}
	for _, f := range n.Forks {
		under = append(under, edge{f, "⑂ "})
	}
	if n.Continuation != nil {
		under = append(under, edge{n.Continuation, "↳ "})
	}
	for i, e := range under {
		branch, below := "├─ ", "│  "
		if i == len(under)-1 {
			branch, below = "└─ ", "   "
		}
		printTree(w, e.n, rest+branch+e.mark, rest+below)
	}
}

func threadTree(c *cli.Context) error {
	s, rec, err := openThread(c)
	if err != nil {
		return err
	}
	defer s.Close()
	n, err := s.orch.Tree(c.Context, rec, 0)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, n)
	}
	printTree(c.App.Writer, n, "", "")
	return nil
}

func threadChain(c *cli.Context) error {
	id, s, err := openID(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	ch, err := s.orch.GetChain(c.Context, id)
	if err != nil {
		return notFound(id, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, ch)
	}
	for i, r := range ch.Chain {
		fmt.Fprintf(c.App.Writer, "%d  %s  %s", i, r.ThreadID, r.Status)
		if r.ForkedFrom != "" {
			fmt.Fprintf(c.App.Writer, "  fork of %s at turn %d", r.ForkedFrom, r.ForkTurn)
		}
		fmt.Fprintln(c.App.Writer)
	}
	for _, f := range ch.Forks {
		fmt.Fprintf(c.App.Writer, "⑂  %s  %s  fork of %s at turn %d\n", f.ThreadID, f.Status, f.ForkedFrom, f.ForkTurn)
	}
	return nil
}

func threadWait(c *cli.Context) error {
	if c.NArg() == 0 {
		return usagef("thread wait takes one or more thread IDs")
	}
	if err := checkTimeout(c); err != nil {
		return err
	}
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	ids := c.Args().Slice()
	for _, id := range ids {
		if _, err := s.orch.Record(c.Context, id); err != nil {
			return notFound(id, err)
		}
	}
	if err := nothingRuns(c, s, ids); err != nil {
		return err
	}
	res, err := waitFor(c, s, ids)
	if err != nil {
		return waitError(c, s, ids, err)
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, res); err != nil {
			return err
		}
	}
	failed := 0
	for _, id := range ids {
		r := res[id]
		if !c.Bool("json") {
			// Always three columns (deploy/fleet.sh and users' scripts
			// read them): the id waited on, where its chain ended (itself
			// when it did not go on), its status.
			fmt.Fprintf(c.App.Writer, "%s  →  %s  %s\n", id, r.ThreadID, r.Status)
		}
		if r.Status != thread.StatusCompleted {
			failed++
		}
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d threads did not complete", failed, len(ids))}
	}
	return nil
}

func threadCancel(c *cli.Context) error {
	id, s, err := openID(c, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	// A continued thread lives on in its continuation: the chain's
	// current thread is the one to cancel.
	r, err := s.orch.CancelChain(c.Context, id, c.Bool("cascade"))
	if err != nil {
		return notFound(id, err)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
	}
	if !r.CancelRequested {
		fmt.Fprintf(c.App.Writer, "%s  already %s, nothing to cancel\n", r.ThreadID, r.Status)
		return nil
	}
	fmt.Fprintf(c.App.Writer, "%s  cancel requested (status %s)\n", r.ThreadID, r.Status)
	return nil
}

func threadResume(c *cli.Context) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	if strings.TrimSpace(c.String("message")) == "" {
		return usagef("thread resume needs --message TEXT")
	}
	s, _, err := openRecord(c, id, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.orch.Resume(c.Context, id, c.String("message"))
	if err != nil {
		return err
	}
	line := fmt.Sprintf("resumed %s as %s (%s reconstructed)", res.ResolvedThreadID, res.NewThreadID, thread.Count(res.ReconstructedTurns, "turn", "turns"))
	if c.Bool("wait") {
		// Waited for, a resume prints the new thread's end as a run does.
		fmt.Fprintln(c.App.ErrWriter, "spool: "+line)
		return waitEnd(c, s, res.NewThreadID, nil)
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, res)
	}
	fmt.Fprintln(c.App.Writer, line)
	return nil
}

func threadSearch(c *cli.Context) error {
	id, err := oneID(c)
	if err != nil {
		return err
	}
	if c.String("query") == "" {
		return usagef("thread search needs --query REGEX")
	}
	if _, err := regexp.Compile(c.String("query")); err != nil {
		return usagef("--query: %v", err)
	}
	s, _, err := openRecord(c, id, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	matches, err := s.orch.Search(c.Context, id, c.String("query"), c.Int("max"))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if matches == nil {
			matches = []transcript.Match{}
		}
		return printJSON(c.App.Writer, map[string]any{"success": true, "matches": matches})
	}
	for _, m := range matches {
		fmt.Fprintf(c.App.Writer, "%s  seg %d  line %d  %s\n", m.ThreadID, m.Seq, m.Line, m.Text)
	}
	warnUnverified(c, s, "search of "+id)
	return nil
}

// envTraceParent is the W3C trace context a caller hands the CLI in the
// TRACEPARENT variable (OpenTelemetry's environment carrier, as CI systems
// and otel-cli set it), "" when unset or malformed: a thread started with
// one belongs to the caller's trace, as through the API's traceparent
// header.
func envTraceParent() string {
	tp := os.Getenv("TRACEPARENT")
	if _, ok := telemetry.Parse(tp); !ok {
		return ""
	}
	return tp
}
