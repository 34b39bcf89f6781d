package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/worker"
)

// runFlags are the flags `thread run` and `graph run` share, after their
// own; what the run starts is `what` ("thread", "run").
func runFlags(what string, concurrency int) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "parent", EnvVars: []string{"RYE_PARENT_THREAD_ID"}, Usage: "parent thread id"},
		&cli.StringFlag{Name: "queue", Usage: "asynq queue (default: the parent's, else default)"},
		&cli.BoolFlag{Name: "wait", Usage: "wait for the " + what + " (and its continuations) to finish, saying on stderr what it waits for (a person's approval, its tenant's spend window, admission)"},
		&cli.BoolFlag{Name: "follow", Usage: "show a live view while it runs"},
		&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "how long --wait waits (exit 1 after it; the " + what + " keeps running); 0 waits without a limit"},
		&cli.BoolFlag{Name: "embedded", Usage: "run everything in this process: embedded Redis, local store, a worker"},
		&cli.IntFlag{Name: "concurrency", Value: concurrency, Usage: "with --embedded: the in-process worker's concurrency"},
		&cli.StringFlag{Name: "tenant", EnvVars: []string{"SPOOL_TENANT"}, Usage: "the tenant the " + what + "'s tree runs for (default: default; with --parent: the parent's)"},
		&cli.IntFlag{Name: "priority", Usage: "1 (highest) to 5 (default: the tenant's, 3 unless set; with --parent: the parent's)"},
		&cli.StringFlag{Name: "idempotency-key", Usage: "start the " + what + " once per key in its tenant (1 to 255 printable ASCII): a start with a key already used returns its " + what + " (\"existing\": true)"},
		&cli.StringSliceFlag{Name: "tag", Usage: "label the " + what + " and every run of its tree with key=value (repeat for more): thread list --tag finds them"},
		&cli.StringFlag{Name: "notify", Usage: "POST the " + what + "'s events (completed, error, cancelled, waiting for approval) to this http(s) URL, as webhooks.yaml's endpoints get them"},
	}
}

// admission is what --tenant, --priority and --idempotency-key ask of a
// run's start.
type admission struct {
	tenant   string
	priority int
	key      string
	tags     map[string]string
	notify   string
}

// tenantFlags are --tenant, --priority and --idempotency-key, checked
// before anything is opened (tenant_invalid, priority_invalid,
// idempotency_key_invalid: exit 2); zero when not given.
func tenantFlags(c *cli.Context) (admission, error) {
	tenant, priority, err := tenantAndPriority(c)
	if err != nil {
		return admission{}, err
	}
	key := c.String("idempotency-key")
	if c.IsSet("idempotency-key") {
		if err := thread.CheckIdempotencyKey(key); err != nil {
			return admission{}, err
		}
	}
	tags, err := thread.ParseTags(c.StringSlice("tag"))
	if err != nil {
		return admission{}, err
	}
	notify := c.String("notify")
	if notify != "" {
		if err := config.CheckWebhookURL(notify); err != nil {
			return admission{}, usagef("--notify: %v", err)
		}
	}
	return admission{tenant: tenant, priority: priority, key: key, tags: tags, notify: notify}, nil
}

// apply sets a's fields on req, a start from the CLI.
func (a admission) apply(req *orchestrator.StartRequest) {
	req.Tenant, req.Priority, req.IdempotencyKey, req.Surface = a.tenant, a.priority, a.key, orchestrator.SurfaceCLI
	req.Tags, req.Notify = a.tags, a.notify
}

// listFlags are the filters `thread list` and `graph list` share: tags,
// a creation time range and the cursor of a page.
func listFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringSliceFlag{Name: "tag", Usage: "only runs that carry this key=value tag (repeat: all of them)"},
		&cli.StringFlag{Name: "since", Usage: "only runs created at or after this: an RFC 3339 time, a date (2026-12-01) or a duration ago (24h, 7d)"},
		&cli.StringFlag{Name: "until", Usage: "only runs created at or before this (as --since)"},
		&cli.StringFlag{Name: "cursor", Usage: "the next page: the next_cursor a listing printed"},
	}
}

// listFilter fills f's tags, time range and cursor from listFlags,
// checked (exit 2).
func listFilter(c *cli.Context, f *orchestrator.Filter) error {
	err := orchestrator.ListRange(f, c.StringSlice("tag"), c.String("since"), c.String("until"), c.String("cursor"))
	var ae *thread.AdmissionError
	if err != nil && !errors.As(err, &ae) {
		return usagef("--%v", err)
	}
	return err
}

// tenantListFlag is a list's --tenant, of what it lists.
func tenantListFlag(what string) *cli.StringFlag {
	return &cli.StringFlag{Name: "tenant", Usage: "only the " + what + " of this tenant"}
}

// listTenant is a list's --tenant, checked (tenant_invalid: exit 2); ""
// for every tenant.
func listTenant(c *cli.Context) (string, error) {
	t := c.String("tenant")
	if t == "" {
		return "", nil
	}
	return t, thread.CheckTenant(t)
}

// tenantAndPriority are --tenant and --priority, checked; "" and 0 when
// not given.
func tenantAndPriority(c *cli.Context) (tenant string, priority int, err error) {
	if tenant = c.String("tenant"); tenant != "" {
		if err := thread.CheckTenant(tenant); err != nil {
			return "", 0, err
		}
	}
	if c.IsSet("priority") {
		priority = c.Int("priority")
		if err := thread.CheckPriority(priority); err != nil {
			return "", 0, err
		}
	}
	return tenant, priority, nil
}

// runStart is what a run command starts, on the services: the launch's
// result, or its error as the command reports it.
type runStart func(s *services, log *slog.Logger) (*launch.Started, error)

// startAndWait is the path `thread run` and `graph run` share: open the
// services (with --embedded, an in-process worker that serves the run's
// own tree), start, then print the id (--json: the record), or wait for
// the end (following it with --follow) and print it (waitEnd), failing
// unless it completed.
func startAndWait(c *cli.Context, start runStart) error {
	s, err := openServices(c, openOpts{startEmbedded: c.Bool("embedded"), joinDev: c.Bool("embedded"), noEmbedded: !c.Bool("embedded"), holdNotices: true})
	if err != nil {
		return err
	}
	defer s.Close()
	queues := embeddedQueues(c.String("queue"))
	tree, err := newOwnTree(c, s)
	if err != nil {
		return err
	}
	if c.Bool("embedded") {
		w, err := startEmbeddedWorker(c, s, queues, tree)
		if err != nil {
			return err
		}
		defer w.Stop()
	}
	defer tree.done() // before the worker stops: none of its activations waits for the tree's root
	// What the start logs (a tier's script left out of the bundle) is
	// held until it started: a refusal is one line on stderr that says
	// why, with nothing before it.
	var held bytes.Buffer
	started, err := start(s, loggerTo(c, &held))
	if err != nil {
		return err
	}
	_, _ = c.App.ErrWriter.Write(held.Bytes())
	rec := started.Record
	tree.started(c, s, rec.ThreadID)
	warnMissingKey(c, s, started)
	warnUnserved(c, s, rec, queues)
	if !c.Bool("wait") && !c.Bool("follow") && !c.Bool("embedded") {
		if c.Bool("json") {
			return printJSON(c.App.Writer, rec)
		}
		fmt.Fprintln(c.App.Writer, rec.ThreadID)
		return nil
	}
	return waitEnd(c, s, rec.ThreadID, rec.Existing)
}

// embeddedQueues is the queues an --embedded run's worker serves: the
// usual three, and the run's own queue q, whatever it is, so that the run
// (and its children, on its queue) runs in this process.
func embeddedQueues(q string) map[string]int {
	queues := map[string]int{"critical": 6, orchestrator.DefaultQueue: 3, "low": 1}
	if q != "" && queues[q] == 0 {
		queues[q] = 3
	}
	return queues
}

// startEmbeddedWorker starts the in-process worker of an --embedded run,
// on queues, serving the run's own tree; the caller stops it.
func startEmbeddedWorker(c *cli.Context, s *services, queues map[string]int, tree *ownTree) (*worker.Worker, error) {
	w, err := worker.New(worker.Config{Concurrency: c.Int("concurrency"), Queues: queues, Logger: s.log, RecoverInterval: time.Second,
		Serves: tree.serves()}, s.orch)
	if err != nil {
		return nil, err
	}
	if err := w.Start(); err != nil {
		return nil, err
	}
	return w, nil
}

// warnMissingKey warns on stderr when the started thread's model needs a
// provider key this process lacks, and says who needs it: the workers, or
// this process's own worker when it runs the thread.
func warnMissingKey(c *cli.Context, s *services, started *launch.Started) {
	if started.MissingKey == "" {
		return
	}
	where := "the workers that run it need it"
	if c.Bool("embedded") && !s.joinedDev {
		where = "this process's worker runs it"
	}
	fmt.Fprintf(c.App.ErrWriter, "spool: warning: model %s needs %s, which is not set here; workers hold the provider keys, not the CLI, and %s\n",
		started.Model, started.MissingKey, where)
}

// warnUnserved warns on stderr when rec was put on a queue (--queue) that
// no worker serves, unless this process's own worker serves it: the
// thread stays created until one does.
func warnUnserved(c *cli.Context, s *services, rec *spooltype.Record, queues map[string]int) {
	if _, inProcess := queues[rec.Queue]; !c.IsSet("queue") || (c.Bool("embedded") && inProcess) {
		return
	}
	qs, err := s.orch.QueueServed(c.Context, rec.Queue)
	if err != nil || qs.Served {
		return
	}
	what := "thread"
	if rec.IsGraph() {
		what = "graph run"
	}
	fmt.Fprintf(c.App.ErrWriter, "spool: warning: %s %s is queued, but %s: it stays created until a worker serves the queue (spool worker --queues %s=1)\n",
		what, rec.ThreadID, qs, rec.Queue)
}

// waitEnd is how every command that waits for a run (a thread or a graph
// run: run, resume, fork with --wait) ends: it waits for run id's end
// (following it with --follow, for at most --timeout, saying what it
// waits for when a person must decide: waitFor), prints it (printFinal),
// then the notices held while it ran. existing is an idempotent start's
// answer (Record.Existing), which the end it prints carries.
func waitEnd(c *cli.Context, s *services, id string, existing *bool) error {
	res, err := waitFor(c, s, []string{id})
	if err != nil {
		return waitError(c, s, []string{id}, err)
	}
	final := res[id]
	if final != nil && existing != nil {
		// An idempotent start's answer says whether it made the run.
		cp := *final
		cp.Existing = existing
		final = &cp
	}
	if err := printFinal(c, s, final); err != nil {
		return err
	}
	_, _ = c.App.ErrWriter.Write(s.notices.Bytes())
	return nil
}

// printFinal prints the final record of a waited-for run (--json: the
// record; else a thread's or a graph run's text view, whose spend it
// reads on s) and fails (exit 1) unless it completed.
func printFinal(c *cli.Context, s *services, final *spooltype.Record) error {
	what := "thread"
	if final.IsGraph() {
		what = "run"
	}
	switch {
	case c.Bool("json"):
		if err := printJSON(c.App.Writer, final); err != nil {
			return err
		}
	case final.IsGraph():
		printGraphRecord(c.Context, c.App.Writer, s, final)
	default:
		printRecord(c.App.Writer, final)
	}
	if final.Status != thread.StatusCompleted {
		return &exitError{code: 1, err: fmt.Errorf("%s %s ended %s%s", what, final.ThreadID, final.Status, errSuffix(final))}
	}
	return nil
}

// printTenant prints the run's tenant and priority, unless both are the
// defaults (a fleet without tenants sees no new line).
func printTenant(w io.Writer, r *spooltype.Record) {
	if r.TenantOrDefault() == thread.DefaultTenant && r.PriorityOrDefault() == thread.DefaultPriority {
		return
	}
	fmt.Fprintf(w, "tenant     %s · priority %d\n", r.TenantOrDefault(), r.PriorityOrDefault())
}
