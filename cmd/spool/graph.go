package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// `spool graph`: graph runs (.ai/graphs/NAME.yaml), walked by workers as
// threads are run; a run's record, budget, transcript and cancel are a
// thread's, so `thread wait|tree|transcript|verify|cancel` and `budget
// show` take run ids too.
func graphCommand() *cli.Command {
	return &cli.Command{
		Name:  "graph",
		Usage: "run and inspect graph runs (.ai/graphs/NAME.yaml)",
		Subcommands: append([]*cli.Command{
			graphRunCommand(),
			{Name: "validate", Usage: "parse and validate graph files, enqueue nothing", ArgsUsage: "PATH|NAME...",
				Description: "Each argument is a graph file, or a graph name resolved in the project (.ai/graphs/NAME.yaml).\n" +
					"Errors name the node or key; warnings do not fail. Exit 1 when any graph has errors.",
				Flags: []cli.Flag{jsonFlag(), &cli.BoolFlag{Name: "normalize", Usage: "print each graph's canonical form (YAML)"}}, Action: graphValidate},
			{Name: "list", Usage: "list graph runs, newest first", Flags: append([]cli.Flag{jsonFlag(),
				&cli.StringFlag{Name: "status", Usage: "only runs in this status"},
				&cli.StringFlag{Name: "graph", Usage: "only runs of this graph"},
				tenantListFlag("runs"),
				&cli.IntFlag{Name: "limit", Value: 100, Usage: "list at most this many runs"}}, listFlags()...), Action: graphList},
			{Name: "show", Usage: "a run's record and node table", ArgsUsage: "RUN", Flags: []cli.Flag{jsonFlag(),
				&cli.BoolFlag{Name: "markdown", Usage: "print the knowledge render (node table and step history)"}}, Action: graphShow},
			{Name: "state", Usage: "the state after a step (default: the last checkpoint's)", ArgsUsage: "RUN", Flags: []cli.Flag{jsonFlag(),
				&cli.IntFlag{Name: "step", Value: -1, Usage: "the step whose state to print"}}, Action: graphState},
			{Name: "cancel", Usage: "cancel a run; its running children are cancelled too", ArgsUsage: "RUN", Flags: []cli.Flag{jsonFlag()}, Action: graphCancel},
			graphSendCommand(),
			graphReplayCommand(),
			{Name: "resume", Usage: "a continuation run of a failed or cancelled run, from its last checkpoint", ArgsUsage: "RUN",
				Flags: []cli.Flag{jsonFlag(),
					&cli.StringFlag{Name: "from", Usage: "go on from this node instead"},
					&cli.StringSliceFlag{Name: "set", Usage: "set a state key: KEY=JSON (repeatable)"},
					&cli.BoolFlag{Name: "wait", Usage: "wait for the new run to finish and print its record (exit 1 unless it completed)"},
					&cli.BoolFlag{Name: "follow", Usage: "with --wait, show a live view while it runs"},
					&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "how long --wait waits (exit 1 after it; the run keeps running); 0 waits without a limit"}},
				Action: graphResume},
			{Name: "fork", Usage: "a new run beside RUN from its checkpoint after a step (RUN is left as it is)", ArgsUsage: "RUN",
				Description: "The fork has RUN's graph, inputs, parent and limits, the state and cursor RUN had after step N, and what\n" +
					"RUN's budget had left then; it runs every step after N again (RUN's children are not adopted).\n\n" +
					"Examples:\n" +
					"   spool graph fork RUN --at-step 2\n" +
					"   spool graph fork RUN --at-step 1 --set planned=2 --from review --wait",
				Flags: []cli.Flag{jsonFlag(),
					&cli.IntFlag{Name: "at-step", Usage: "the step (from 1) whose checkpoint the fork starts from (required)"},
					&cli.StringFlag{Name: "from", Usage: "go on from this node instead of the checkpoint's next node"},
					&cli.StringSliceFlag{Name: "set", Usage: "set a state key: KEY=JSON (repeatable)"},
					&cli.BoolFlag{Name: "wait", Usage: "wait for the fork to finish and print its record"},
					&cli.BoolFlag{Name: "follow", Usage: "with --wait, show a live view while it runs"},
					&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "how long --wait waits"}}, Action: graphFork},
			{Name: "wait", Usage: "wait for graph runs to end (following resumes), as thread wait does", ArgsUsage: "RUN...", Flags: []cli.Flag{jsonFlag(),
				&cli.DurationFlag{Name: "timeout", Value: 600 * time.Second, Usage: "give up after this long (exit 1; the runs keep running); 0 waits without a limit"}}, Action: threadWait},
			{Name: "transcript", Usage: "print a run's transcript", ArgsUsage: "RUN", Flags: []cli.Flag{
				&cli.BoolFlag{Name: "json", Usage: "print JSON lines, one event a line (--format jsonl)"},
				&cli.BoolFlag{Name: "follow", Usage: "keep printing as the run goes"},
				&cli.StringFlag{Name: "format", Value: "text", Usage: "jsonl, text or markdown"},
				&cli.BoolFlag{Name: "lenient", Usage: "a transcript that fails verification: print its intact prefix, warn, exit 0"}}, Action: threadTranscript},
		}, pauseCommands("RUN")...),
	}
}

func graphRunCommand() *cli.Command {
	return &cli.Command{
		Name:      "run",
		Usage:     "start a graph run",
		ArgsUsage: "GRAPH",
		Description: "Starts a run of .ai/graphs/GRAPH.yaml and prints its ID, or with --wait its final record (exit 1 when it did not\n" +
			"complete). Inputs are checked against the graph's inputs schema, and the graph is validated, before anything\n" +
			"starts (exit 2).\n\n" +
			"Examples:\n" +
			"   spool graph run demo/review --inputs-json '{\"topics\": [\"queues\", \"leases\"]}' --embedded --wait\n" +
			"   spool graph run demo/review --input title=weekly --inputs-json @topics.json --limit spend=0.5 --limit max_steps=20 --json",
		Flags: append([]cli.Flag{
			jsonFlag(),
			&cli.StringSliceFlag{Name: "input", Usage: "input k=v (repeatable), converted to the type the graph declares"},
			&cli.StringFlag{Name: "inputs-json", Usage: "inputs as a JSON object, or @FILE to read it from FILE (@- for stdin)"},
			&cli.StringSliceFlag{Name: "limit", Usage: "limit override k=v: spend, duration, depth, spawns, turns, tokens, max_steps"},
		}, runFlags("run", 8)...),
		Action: graphRun,
	}
}

// graphLimits reads --limit, with max_steps beside the thread limits.
func graphLimits(c *cli.Context) (thread.Limits, int, error) {
	maxSteps := 0
	var rest []string
	for _, kv := range c.StringSlice("limit") {
		k, v, ok := strings.Cut(kv, "=")
		if ok && k == "max_steps" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > graph.MaxStepsCap {
				return thread.Limits{}, 0, usagef("--limit %s: want a whole number from 1 to %d", kv, graph.MaxStepsCap)
			}
			maxSteps = n
			continue
		}
		rest = append(rest, kv)
	}
	var l thread.Limits
	for _, kv := range rest {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return l, 0, usagef("--limit %q: want name=value", kv)
		}
		if err := l.SetLimit(k, v); err != nil {
			return l, 0, usagef("--limit %s: %v (a graph also takes max_steps)", kv, err)
		}
	}
	return l, maxSteps, nil
}

func graphRun(c *cli.Context) error {
	if c.NArg() != 1 {
		return usagef("graph run takes one GRAPH argument")
	}
	name, err := orchestrator.GraphName(c.Args().First())
	if err != nil {
		return usagef("%v", err)
	}
	if err := checkTimeout(c); err != nil {
		return err
	}
	inputs, err := parseInputs(c)
	if err != nil {
		return err
	}
	limits, maxSteps, err := graphLimits(c)
	if err != nil {
		return err
	}
	adm, err := tenantFlags(c)
	if err != nil {
		return err
	}
	if _, err := existingProject(c); err != nil {
		return err
	}
	return startAndWait(c, func(s *services, log *slog.Logger) (*launch.Started, error) {
		req := orchestrator.StartRequest{Graph: true, Directive: name, Inputs: inputs, LimitOverrides: limits, MaxSteps: maxSteps,
			ParentID: c.String("parent"), Queue: c.String("queue"), TraceParent: envTraceParent()}
		adm.apply(&req)
		started, err := launch.Start(c.Context, s.orch, launch.Request{Project: s.project, UserDir: s.userDir, Logger: log, StartRequest: req})
		if errors.Is(err, launch.ErrRefused) || errors.Is(err, orchestrator.ErrGraphNotFound) {
			return nil, &usageError{msg: err.Error()}
		}
		return started, err
	})
}

// printGraphRecord prints a run's record as text, its spend as its
// chain's against the chain's limit (read on s).
func printGraphRecord(ctx context.Context, w io.Writer, s *services, r *spooltype.Record) {
	fmt.Fprintf(w, "run        %s\n", r.ThreadID)
	fmt.Fprintf(w, "graph      %s\n", r.Directive)
	status := string(r.Status)
	if r.Status == thread.StatusCompleted && r.SuppressedErrors > 0 {
		status = "completed (" + thread.Count(r.SuppressedErrors, "error", "errors") + " suppressed)"
	}
	fmt.Fprintf(w, "status     %s\n", status)
	if r.ParentID != "" {
		fmt.Fprintf(w, "parent     %s\n", r.ParentID)
	}
	if r.ForkedFrom != "" {
		fmt.Fprintf(w, "fork of    %s at step %d\n", r.ForkedFrom, r.ForkTurn)
	}
	printChain(w, r)
	printTenant(w, r)
	printPaused(w, r)
	if r.CurrentNode != "" {
		fmt.Fprintf(w, "node       %s\n", r.CurrentNode)
	}
	printAwaiting(ctx, w, s, r)
	if at, ok := orchestrator.SleepingUntil(r); ok {
		fmt.Fprintf(w, "waiting    sleeping until %s\n", at.Format(time.RFC3339))
	}
	if name, at, ok := orchestrator.WaitingForMessageOf(r); ok {
		line := fmt.Sprintf("waiting    for message %s (spool graph send %s %s --data JSON)", name, r.ThreadID, name)
		if !at.IsZero() {
			line += ", until " + at.Format(time.RFC3339)
		}
		fmt.Fprintln(w, line)
	}
	fmt.Fprintf(w, "steps      %d of %d\n", r.Step, r.MaxSteps)
	if r.ItemsTotal > 0 && !r.Status.Terminal() {
		fmt.Fprintf(w, "items      %d of %d settled\n", r.ItemsDone, r.ItemsTotal)
	}
	fmt.Fprintf(w, "spend      %s\n", spendLine(ctx, s, r))
	if len(r.Outputs) > 0 {
		b, _ := json.Marshal(r.Outputs)
		fmt.Fprintf(w, "outputs    %s\n", b)
	}
	if r.Error != nil {
		fmt.Fprintf(w, "error      %s\n", r.Error.Line())
	}
}

// graphValidation is what `graph validate` says of one argument.
type graphValidation struct {
	Path     string   `json:"path"`
	Graph    string   `json:"graph,omitempty"`
	OK       bool     `json:"ok"`
	Errors   []string `json:"errors"`
	Warnings []string `json:"warnings"`
}

func graphValidate(c *cli.Context) error {
	if c.NArg() == 0 {
		return usagef("graph validate takes one or more paths or graph names")
	}
	var out []graphValidation
	bad := 0
	tk := toolChecks{}
	for _, arg := range c.Args().Slice() {
		res, g := validateGraphArg(c, arg, tk)
		if !res.OK {
			bad++
		}
		out = append(out, res)
		if c.Bool("normalize") && g != nil && res.OK && !c.Bool("json") {
			b, err := g.Canonical()
			if err != nil {
				return err
			}
			fmt.Fprintf(c.App.Writer, "# %s\n%s", arg, b)
		}
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, out); err != nil {
			return err
		}
	} else if !c.Bool("normalize") {
		printValidations(c.App.Writer, out)
	}
	if bad > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %s %s not validate", bad, thread.Count(len(out), "graph", "graphs"), map[bool]string{true: "does", false: "do"}[bad == 1])}
	}
	return nil
}

// validateGraphArg reads and parses one graph validate argument and says
// what is wrong with it; the graph is nil when it could not be read or
// parsed.
func validateGraphArg(c *cli.Context, arg string, tk toolChecks) (graphValidation, *graph.Graph) {
	res := graphValidation{Path: arg, Errors: []string{}, Warnings: []string{}}
	data, name, err := readGraphArg(c, arg)
	if err != nil {
		res.Errors = append(res.Errors, err.Error())
		return res, nil
	}
	g, rep, err := graph.Parse(name, data)
	res.Graph = name
	if err != nil {
		res.Errors = append(res.Errors, err.Error())
	}
	for _, d := range rep.Errors {
		res.Errors = append(res.Errors, d.String())
	}
	for _, d := range rep.Warnings {
		res.Warnings = append(res.Warnings, d.String())
	}
	if g != nil {
		res.Warnings = append(res.Warnings, tk.check(graphProject(c, arg), g)...)
	}
	res.OK = len(res.Errors) == 0
	return res, g
}

// toolChecks are the tools each project's graphs can name (GraphTools),
// read once per project; a project's problems are said the first time.
type toolChecks map[string]*projectTools

type projectTools struct {
	known    func(string) bool
	names    []string
	problems []string
}

// check is the warnings about g's tool actions that name no tool of
// project.
func (tk toolChecks) check(project string, g *graph.Graph) []string {
	pt, ok := tk[project]
	if !ok {
		known, names, problems := launch.GraphTools(os.DirFS(project))
		pt = &projectTools{known: known, names: names, problems: problems}
		tk[project] = pt
	}
	var out []string
	for _, p := range pt.problems {
		out = append(out, project+": "+p)
	}
	pt.problems = nil
	for _, d := range g.UnknownTools(pt.known, pt.names) {
		out = append(out, d.String())
	}
	return out
}

// graphProject is the project a graph validate argument belongs to: the
// directory above the .ai/graphs or .ai/tools its file is in, else
// --project (the working directory when unset).
func graphProject(c *cli.Context, arg string) string {
	def := c.String("project")
	if def == "" {
		def = "."
	}
	abs, err := filepath.Abs(arg)
	if err != nil {
		return def
	}
	if st, err := os.Stat(abs); err != nil || st.IsDir() {
		return def
	}
	sep := string(filepath.Separator)
	for _, dir := range []string{".ai" + sep + "graphs" + sep, ".ai" + sep + "tools" + sep} {
		if i := strings.LastIndex(abs, sep+dir); i >= 0 {
			return abs[:i]
		}
	}
	return def
}

// printValidations prints graph validate's verdicts as lines: "ok", then
// each error, then each warning, prefixed with the argument.
func printValidations(w io.Writer, out []graphValidation) {
	for _, r := range out {
		if r.OK {
			fmt.Fprintf(w, "%s: ok\n", r.Path)
		}
		for _, e := range r.Errors {
			fmt.Fprintf(w, "%s: error: %s\n", r.Path, e)
		}
		for _, warn := range r.Warnings {
			fmt.Fprintf(w, "%s: warning: %s\n", r.Path, warn)
		}
	}
}

// readGraphArg reads a graph validate argument: a file, else a graph name
// resolved in the project.
func readGraphArg(c *cli.Context, arg string) ([]byte, string, error) {
	if st, err := os.Stat(arg); err == nil && !st.IsDir() {
		b, err := os.ReadFile(arg)
		if err != nil {
			return nil, "", err
		}
		return b, graphNameOfFile(arg), nil
	}
	name, err := orchestrator.GraphName(arg)
	if err != nil {
		return nil, "", err
	}
	proj := c.String("project")
	if proj == "" {
		proj = "."
	}
	b, _, err := orchestrator.FindGraph(os.DirFS(proj), name)
	if err != nil {
		return nil, "", fmt.Errorf("no file %s, and %w", arg, err)
	}
	return b, name, nil
}

// graphNameOfFile is a graph's name from its file: the path under
// .ai/graphs (or .ai/tools) without the extension, else the file's base
// name.
func graphNameOfFile(p string) string {
	p = filepath.ToSlash(p)
	for _, dir := range []string{".ai/graphs/", ".ai/tools/"} {
		if i := strings.LastIndex(p, dir); i >= 0 {
			p = p[i+len(dir):]
			break
		}
	}
	if i := strings.LastIndex(p, "/"); i >= 0 && !strings.Contains(filepath.ToSlash(p), ".ai/") && filepath.IsAbs(p) {
		p = p[i+1:]
	}
	return strings.TrimSuffix(strings.TrimSuffix(p, ".yaml"), ".yml")
}

func graphList(c *cli.Context) error {
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
	s, err := openServices(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	f := orchestrator.Filter{Status: thread.Status(st), Directive: c.String("graph"), Kind: spooltype.KindGraph, Tenant: tenant, Limit: c.Int("limit")}
	if err := listFilter(c, &f); err != nil {
		return err
	}
	// --json stays the list it always was; the next page's cursor is
	// said on stderr, as listPage says it.
	recs, _, err := listPage(c, s, f, "runs")
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, recs)
	}
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tSTATUS\tNODE\tSTEPS\tSPEND")
	for _, r := range recs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t$%.6f\n", r.ThreadID, r.Status, dash(r.CurrentNode), thread.Count(r.Step, "step", "steps"), r.Cost.Spend)
	}
	return tw.Flush()
}

// openGraphRun opens the services and reads the one RUN argument's record,
// which must be a graph run's.
func openGraphRun(c *cli.Context, o openOpts) (*services, *spooltype.Record, error) {
	id, err := oneID(c)
	if err != nil {
		return nil, nil, err
	}
	s, rec, err := openRecord(c, id, o)
	if err != nil {
		return nil, nil, err
	}
	if !rec.IsGraph() {
		s.Close()
		return nil, nil, fmt.Errorf("%s is a thread, not a graph run (spool thread show %s)", id, id)
	}
	return s, rec, nil
}

func graphShow(c *cli.Context) error {
	s, rec, err := openGraphRun(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	// The record's spend is the subtree's at the end; while it runs, the
	// ledger's is live.
	if !rec.Status.Terminal() {
		if spend, err := s.orch.SubtreeSpend(c.Context, rec); err == nil {
			rec.Cost.Spend = spend
		}
	}
	v, err := s.orch.GraphView(c.Context, rec)
	if err != nil {
		return err
	}
	for _, w := range v.Warnings {
		fmt.Fprintf(c.App.ErrWriter, "spool: warning: %s\n", w)
	}
	if c.Bool("markdown") {
		_, err := c.App.Writer.Write(v.Render)
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, spooltype.GraphRun{Record: rec, Nodes: v.Nodes, Steps: v.Steps, WakeAt: v.WakeAt, MessageName: v.MessageName})
	}
	printGraphRecord(c.Context, c.App.Writer, s, rec)
	fmt.Fprintln(c.App.Writer)
	tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tNODE\tKIND\tSTATUS\tVISITS\tLAST STEP\tACTION\tCHILDREN\tDETAIL")
	for _, r := range v.Nodes {
		last := ""
		if r.LastStep > 0 {
			last = strconv.Itoa(r.LastStep)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s %s\t%d\t%s\t%s\t%s\t%s\n", r.Index, r.Node, r.Kind, r.Icon(), r.Status, r.Visits, last, r.Action, r.Children, r.Detail)
	}
	return tw.Flush()
}

func graphState(c *cli.Context) error {
	s, rec, err := openGraphRun(c, openOpts{readOnly: true})
	if err != nil {
		return err
	}
	defer s.Close()
	st, step, err := s.orch.GraphState(c.Context, rec, c.Int("step"))
	if err != nil {
		return err
	}
	if c.Bool("json") {
		return printJSON(c.App.Writer, map[string]any{"run_id": rec.ThreadID, "step": step, "state": st})
	}
	return printJSON(c.App.Writer, st)
}

func graphCancel(c *cli.Context) error {
	s, rec, err := openGraphRun(c, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	id := rec.ThreadID
	r, err := s.orch.CancelChain(c.Context, id, true)
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
	fmt.Fprintf(c.App.Writer, "%s  cancel requested (status %s); its running children are cancelled too\n", r.ThreadID, r.Status)
	return nil
}

// graphSets reads --set KEY=JSON.
func graphSets(c *cli.Context) (map[string]any, error) {
	sets := map[string]any{}
	for _, kv := range c.StringSlice("set") {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, usagef("--set %q: want KEY=JSON", kv)
		}
		var val any
		if err := json.Unmarshal([]byte(v), &val); err != nil {
			return nil, usagef("--set %s: the value is not JSON: %v (quote text: --set %s='\"text\"')", k, err, k)
		}
		sets[k] = val
	}
	return sets, nil
}

func graphResume(c *cli.Context) error {
	if err := checkTimeout(c); err != nil {
		return err
	}
	sets, err := graphSets(c)
	if err != nil {
		return err
	}
	s, rec, err := openGraphRun(c, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.orch.ResumeGraph(c.Context, rec.ThreadID, orchestrator.GraphResumeRequest{From: c.String("from"), Set: sets})
	if errors.Is(err, orchestrator.ErrGraphInvalid) {
		return &usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}
	if !c.Bool("wait") {
		if c.Bool("json") {
			return printJSON(c.App.Writer, res)
		}
		fmt.Fprintf(c.App.Writer, "resumed %s as %s\n", res.ResolvedThreadID, res.NewThreadID)
		return nil
	}
	// Waited for, a resume prints the new run's end as a start and a
	// fork do.
	fmt.Fprintf(c.App.ErrWriter, "spool: resumed %s as %s\n", res.ResolvedThreadID, res.NewThreadID)
	return waitEnd(c, s, res.NewThreadID, nil)
}

func graphFork(c *cli.Context) error {
	if !c.IsSet("at-step") {
		return usagef("graph fork needs --at-step N: the step whose checkpoint the fork starts from (spool graph show RUN lists the steps)")
	}
	if err := checkTimeout(c); err != nil {
		return err
	}
	sets, err := graphSets(c)
	if err != nil {
		return err
	}
	s, rec, err := openGraphRun(c, openOpts{})
	if err != nil {
		return err
	}
	defer s.Close()
	res, err := s.orch.ForkGraph(c.Context, orchestrator.GraphForkRequest{RunID: rec.ThreadID, AtStep: c.Int("at-step"), From: c.String("from"), Set: sets})
	var se *orchestrator.StepNotRecordedError
	if errors.Is(err, orchestrator.ErrGraphInvalid) || errors.As(err, &se) {
		return &usageError{msg: err.Error()}
	}
	if err != nil {
		return err
	}
	if !c.Bool("wait") {
		if c.Bool("json") {
			return printJSON(c.App.Writer, res)
		}
		fmt.Fprintf(c.App.Writer, "forked %s at step %d as %s (next node %s, budget $%g)\n", res.ForkedFrom, res.ForkStep, res.Run.ThreadID,
			dash(res.NextNode), res.Budget)
		return nil
	}
	return waitEnd(c, s, res.Run.ThreadID, nil)
}
