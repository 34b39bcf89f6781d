package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/httpauth"
	"github.com/spool-run/spool/monitor"
	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/stack"
)

func devCommand() *cli.Command {
	flags := []cli.Flag{
		&cli.StringFlag{Name: "addr", Value: "127.0.0.1:8080", EnvVars: []string{"SPOOL_DEV_ADDR"}, Usage: "serve the monitor UI, /metrics and /healthz here"},
	}
	// The worker's and the scheduler's flags, less their --metrics-addr:
	// dev serves metrics beside the monitor on --addr.
	seen := map[string]bool{"metrics-addr": true}
	for _, f := range append(workerFlags(), schedulerFlags()...) {
		if n := f.Names()[0]; !seen[n] {
			seen[n] = true
			flags = append(flags, f)
		}
	}
	return &cli.Command{
		Name:  "dev",
		Usage: "embedded Redis + local store + worker + scheduler + monitor, one process",
		Description: "Runs everything spool needs in one process, with nothing installed: a Redis (redis-server from PATH\n" +
			"with its data in the data dir, else an in-memory one), the local blob store, a worker, the scheduler\n" +
			"and the monitor. Other spool commands in the same project find its Redis by themselves.\n" +
			"Ctrl-C stops the worker (in-flight turns checkpoint), the scheduler, the monitor, then Redis.",
		Flags:  flags,
		Action: dev,
	}
}

func dev(c *cli.Context) error {
	if err := checkDevFlags(c); err != nil {
		return err
	}
	devFile, err := claimDevFile(c)
	if err != nil {
		return err
	}
	defer devFile.Close()
	s, err := openServices(c, openOpts{startEmbedded: true})
	if err != nil {
		return err
	}
	// Deferred calls run last first: Redis (s.Close) goes down last,
	// sealed just before (sealEmbedded) once nothing of dev writes to it.
	defer s.Close()
	var sch *scheduler.Scheduler
	defer func() { sealEmbedded(s, sch) }()
	if s.embedded != nil {
		if err := devFile.Publish(s.embedded.URL); err != nil {
			return err
		}
	}

	admDesc, err := devPolicy(c, s)
	if err != nil {
		return err
	}
	reg, err := processRegistry(c, s)
	if err != nil {
		return err
	}
	w, err := newWorker(c, s, reg)
	if err != nil {
		return err
	}
	sch, schedDesc, err := newScheduler(c, s, reg)
	if err != nil {
		return err
	}
	stopHTTP, monitorDesc, err := serveDevHTTP(c, s, reg)
	if err != nil {
		return err
	}
	defer stopHTTP()
	if err := sch.Start(); err != nil {
		return err
	}
	defer sch.Stop()
	if err := w.Start(); err != nil {
		return err
	}
	defer w.Stop()

	printBanner(c, c.App.Writer, s, schedDesc, monitorDesc, admDesc)
	<-c.Done()
	// Withdrawn first: no command finds a Redis that is going away.
	devFile.Close()
	fmt.Fprintln(c.App.ErrWriter, "spool dev: stopping: worker, scheduler, monitor, then redis")
	return nil
}

// sealEmbedded seals dev's own redis-server (a persistent embedded one)
// after its worker, scheduler and monitor stopped, before it goes down
// cleanly: the next start's scheduler (cleanStopOf) then tells the
// restart of a Redis that kept every write from one that lost some,
// and only warns of the second. Nothing is sealed when the scheduler did
// not start; a seal that fails is logged, and the next start only warns
// as it would without one.
func sealEmbedded(s *services, sch *scheduler.Scheduler) {
	if sch == nil || s.embedded == nil || !s.embedded.Persistent {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	cs, err := sch.Seal(ctx)
	if err == nil {
		b, _ := json.Marshal(cs)
		err = s.embedded.Seal(b)
	}
	if err != nil {
		s.log.Warn("embedded redis not sealed: its next start cannot tell that it lost nothing", "error", err)
	}
}

// cleanStopOf is the seal an embedded redis-server's start found (nil
// for none, or for one that does not parse, which is logged).
func cleanStopOf(s *services) *scheduler.CleanStop {
	if s.embedded == nil || s.embedded.Sealed == nil {
		return nil
	}
	var cs scheduler.CleanStop
	if err := json.Unmarshal(s.embedded.Sealed, &cs); err != nil || cs.RunID == "" {
		s.log.Warn("embedded redis: its seal does not parse; a restart is taken as one that may have lost writes", "error", err)
		return nil
	}
	return &cs
}

// checkDevFlags refuses dev's arguments and flags before anything starts:
// any argument, and a worker's, a scheduler's or an --addr flag that does
// not parse.
func checkDevFlags(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	if _, err := workerQueues(c); err != nil {
		return err
	}
	if _, err := schedulerIntervals(c); err != nil {
		return err
	}
	if _, err := httpauth.IsLoopback(c.String("addr")); c.String("addr") != "" && err != nil {
		return usagef("--addr %q: want HOST:PORT", c.String("addr"))
	}
	return nil
}

// claimDevFile claims the dev file of the data dir, unless --redis-url
// names a Redis of its own (nil then). Other commands of this project
// find the embedded Redis through it while dev runs; claimed first, it
// refuses a second dev on the data dir (two redis-servers on one AOF
// directory would corrupt it) and takes over the file of a dev that died.
func claimDevFile(c *cli.Context) (*stack.DevFile, error) {
	dd, err := dataDir(c)
	if err != nil {
		return nil, err
	}
	if c.String("redis-url") != "" {
		return nil, nil
	}
	if err := os.MkdirAll(dd, 0o755); err != nil {
		return nil, err
	}
	return stack.ClaimDevFile(redisURLFile(dd))
}

// serveDevHTTP serves the monitor at "/" beside /metrics and /healthz on
// --addr, open (dev is a local tool) but, on loopback, only to loopback
// Host names. It returns what stops it and the banner's monitor line.
func serveDevHTTP(c *cli.Context, s *services, reg *prometheus.Registry) (func(), string, error) {
	addr := c.String("addr")
	mon, err := newMonitorHandlerWith(s, monitorOptions{hosts: httpauth.LoopbackHosts(addr), registry: reg})
	if err != nil {
		return nil, "", err
	}
	stopHTTP, err := serveMetrics(addr, reg, map[string]http.Handler{"/": mon})
	if err != nil {
		return nil, "", err
	}
	monitorDesc := fmt.Sprintf("http://%s/ (asynqmon at http://%s%s/)", addr, addr, monitor.AsynqPath)
	if addr == "" {
		monitorDesc = "off (--addr is empty)"
	}
	return stopHTTP, monitorDesc, nil
}

// runningDev reads the dev file of the `spool dev` running on the data dir
// (stack.ReadDevFile) and pings its Redis: u is "" when no dev runs there
// (no file, or one a dev that died left behind), and alive says whether
// its Redis answers.
func runningDev(ctx context.Context, urlFile string) (u string, alive bool, err error) {
	u, _, err = stack.ReadDevFile(urlFile, 15*time.Second)
	if err != nil || u == "" {
		return "", false, err
	}
	if rdb, err := stack.OpenRedis(u); err == nil {
		pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		alive = rdb.Ping(pctx).Err() == nil
		cancel()
		_ = rdb.Close()
	}
	return u, alive, nil
}

func printBanner(c *cli.Context, out io.Writer, s *services, schedDesc, monitor, admission string) {
	addr := c.String("addr")
	redisLine := stack.RedactURL(c.String("redis-url"))
	switch {
	case s.embedded != nil && s.embedded.Persistent:
		redisLine = s.embedded.URL + " (redis-server, data in " + filepath.Join(s.dataDir, "redis") + ")"
	case s.embedded != nil:
		redisLine = s.embedded.URL + " (in-memory: no redis-server on PATH, nothing is kept after exit)"
	}
	fmt.Fprintf(out, "spool dev is running (pid %d)\n", os.Getpid())
	fmt.Fprintf(out, "  redis      %s\n", redisLine)
	fmt.Fprintf(out, "  data       %s\n", s.dataDir)
	fmt.Fprintf(out, "  project    %s\n", s.project)
	fmt.Fprintf(out, "  worker     concurrency %d, queues %s\n", c.Int("concurrency"), c.String("queues"))
	fmt.Fprintf(out, "  scheduler  %s\n", schedDesc)
	fmt.Fprintf(out, "  monitor    %s\n", monitor)
	fmt.Fprintf(out, "  metrics    http://%s/metrics\n", addr)
	if admission != "" {
		fmt.Fprintf(out, "  admission  %s\n", admission)
	}
	fmt.Fprintf(out, "Try, in another terminal:\n  %s\n", exampleRun(c, s))
	fmt.Fprintln(out, "Ctrl-C stops it.")
}

// exampleRun is a `spool thread run` command line that works from any
// directory against this dev: a directive of the project (exampleDirective),
// with the flags that locate this dev's data dir.
func exampleRun(c *cli.Context, s *services) string {
	name, inputs := exampleDirective(s.project)
	args := []string{"spool"}
	if wd, err := os.Getwd(); err != nil || wd != s.project {
		args = append(args, "--project", shellQuote(s.project))
	}
	if s.dataDir != filepath.Join(s.project, ".spool") {
		args = append(args, "--data-dir", shellQuote(s.dataDir))
	}
	if ns := c.String("namespace"); ns != "spool" {
		args = append(args, "--namespace", shellQuote(ns))
	}
	if s.embedded == nil {
		args = append(args, "--redis-url", shellQuote(stack.RedactURL(c.String("redis-url"))))
	}
	args = append(args, "thread", "run", name)
	for _, in := range inputs {
		args = append(args, "--input", in+"=VALUE")
	}
	return strings.Join(append(args, "--wait"), " ")
}

// exampleDirective is the directive the dev's banner suggests running:
// the first that needs no input, demo/hello before the others by name;
// else the first with the inputs it requires (no default); "DIRECTIVE" in
// a project without any.
func exampleDirective(project string) (name string, inputs []string) {
	root := filepath.Join(project, ".ai", "directives")
	var found []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			if rel, err := filepath.Rel(root, p); err == nil {
				found = append(found, strings.TrimSuffix(filepath.ToSlash(rel), ".md"))
			}
		}
		return nil
	})
	sort.Strings(found)
	if i := slices.Index(found, "demo/hello"); i > 0 {
		found = append([]string{"demo/hello"}, slices.Delete(found, i, i+1)...)
	}
	var first []string
	for i, f := range found {
		var need []string
		if b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)+".md")); err == nil {
			if d, err := directive.Parse(f+".md", b); err == nil {
				for _, in := range d.Inputs {
					if in.Required && in.Default == nil {
						need = append(need, in.Name)
					}
				}
			}
		}
		if len(need) == 0 {
			return f, nil
		}
		if i == 0 {
			first = need
		}
	}
	if len(found) == 0 {
		return "DIRECTIVE", nil
	}
	return found[0], first
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return (r < 'a' || r > 'z') && (r < 'A' || r > 'Z') && (r < '0' || r > '9') && !strings.ContainsRune("/._-:=,@+", r)
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
