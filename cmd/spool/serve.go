package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/monitor"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/worker"
)

func workerFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "concurrency", Value: 10, EnvVars: []string{"SPOOL_WORKER_CONCURRENCY"}, Usage: "activations run at once"},
		&cli.StringFlag{Name: "queues", Value: "critical=6,default=3,low=1", EnvVars: []string{"SPOOL_WORKER_QUEUES"}, Usage: "queues and weights"},
		&cli.DurationFlag{Name: "shutdown-timeout", Value: 30 * time.Second, Usage: "on SIGTERM, how long in-flight turns may finish"},
		metricsAddrFlag("", ":9090"),
		&cli.DurationFlag{Name: "recover-interval", EnvVars: []string{"SPOOL_RECOVER_INTERVAL"}, Value: 2 * time.Second, Usage: "how often to look for orphaned threads (0 disables)"},
		&cli.DurationFlag{Name: "retry-hand-back", EnvVars: []string{"SPOOL_RETRY_HAND_BACK"}, Value: 10 * time.Second,
			Usage: "a model call retried after at least this long (a provider's retry-after) frees its slot: the thread is handed back until then"},
		&cli.DurationFlag{Name: "storage-patience", EnvVars: []string{"SPOOL_STORAGE_PATIENCE"}, Value: time.Minute,
			Usage: "how long a failing blob store operation is tried again before the activation fails (an S3 outage shorter than this only delays threads; 0 disables)"},
		&cli.BoolFlag{Name: "allow-shell", EnvVars: []string{"SPOOL_ALLOW_SHELL"},
			Usage: "let the built-in tool rye/bash run shell commands here (in a copy of the tree's workspace; a thread also needs the capability rye.execute.tool.rye.bash)"},
		&cli.DurationFlag{Name: "stream-idle", EnvVars: []string{"SPOOL_STREAM_IDLE"}, Value: provider.DefaultStreamIdle,
			Usage: "a streamed model call that sends nothing (not even a ping) for this long is given up and retried, freeing its slot (0: no bound)"},
	}
}

func workerCommand() *cli.Command {
	return &cli.Command{
		Name:  "worker",
		Usage: "serve thread activations from the queues",
		Flags: workerFlags(),
		Action: func(c *cli.Context) error {
			if err := noArgs(c); err != nil {
				return err
			}
			if _, err := workerQueues(c); err != nil {
				return err
			}
			return runService(c, func(s *services, reg *prometheus.Registry) (service, string, error) {
				w, err := newWorker(c, s, reg)
				return w, fmt.Sprintf("spool worker: serving %s with concurrency %d", c.String("queues"), c.Int("concurrency")), err
			})
		},
	}
}

// workerQueues checks the worker's flags and returns its queues; it needs
// no connection, so that bad usage is reported before connecting.
func workerQueues(c *cli.Context) (map[string]int, error) {
	queues, err := worker.ParseQueues(c.String("queues"))
	if err != nil {
		return nil, usagef("--%v", err)
	}
	if c.Int("concurrency") <= 0 {
		return nil, usagef("--concurrency must be positive")
	}
	if c.Duration("retry-hand-back") <= 0 {
		return nil, usagef("--retry-hand-back must be positive")
	}
	if c.Duration("storage-patience") < 0 {
		return nil, usagef("--storage-patience must not be negative")
	}
	if c.Duration("stream-idle") < 0 {
		return nil, usagef("--stream-idle must not be negative")
	}
	return queues, nil
}

func newWorker(c *cli.Context, s *services, reg *prometheus.Registry) (*worker.Worker, error) {
	queues, err := workerQueues(c)
	if err != nil {
		return nil, err
	}
	var m *worker.Metrics
	if reg != nil {
		m = worker.NewMetrics(reg)
	}
	ri := c.Duration("recover-interval")
	if ri == 0 {
		ri = -1
	}
	patience := c.Duration("storage-patience")
	if patience == 0 {
		patience = -1
	}
	pc := provider.ConfigFromEnv()
	if pc.StreamIdle = c.Duration("stream-idle"); pc.StreamIdle == 0 {
		pc.StreamIdle = -1 // no bound
	}
	return worker.New(worker.Config{Concurrency: c.Int("concurrency"), Queues: queues, ShutdownTimeout: c.Duration("shutdown-timeout"),
		Logger: s.log, Metrics: m, RecoverInterval: ri, RetryHandBack: c.Duration("retry-hand-back"), StoragePatience: patience,
		Provider: &pc, AllowShell: c.Bool("allow-shell")}, s.orch)
}

// metricsAddrFlag is a server's --metrics-addr; what names what its
// /metrics has beyond the process's, example a listen address.
func metricsAddrFlag(what, example string) cli.Flag {
	return &cli.StringFlag{Name: "metrics-addr", EnvVars: []string{"SPOOL_METRICS_ADDR"},
		Usage: "serve /metrics" + what + " and /healthz here (e.g. " + example + ")"}
}

// service is a long-running process: a worker or a scheduler.
type service interface {
	Start() error
	Stop()
}

// runService opens the services, builds a service on them with a metrics
// registry that also counts the queues, serves the metrics, and runs the
// service until the command is interrupted; the banner built with it goes
// to stderr once it started, with the pid.
func runService(c *cli.Context, build func(s *services, reg *prometheus.Registry) (service, string, error)) error {
	s, err := openServices(c, openOpts{noEmbedded: true})
	if err != nil {
		return err
	}
	defer s.Close()
	reg, err := processRegistry(c, s)
	if err != nil {
		return err
	}
	reg.MustRegister(monitor.NewQueueCollector(s.orch))
	svc, banner, err := build(s, reg)
	if err != nil {
		return err
	}
	stopHTTP, err := serveMetrics(c.String("metrics-addr"), reg, nil)
	if err != nil {
		return err
	}
	defer stopHTTP()
	if err := svc.Start(); err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "%s (pid %d)\n", banner, os.Getpid())
	<-c.Done()
	svc.Stop()
	return nil
}

// processRegistry is a Prometheus registry with the Go runtime's and the
// process's collectors, the base of every server command's /metrics, and
// exported over OTLP too when OTEL_* asks (one place for every server).
func processRegistry(c *cli.Context, s *services) (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Gathered at each export: what registers later goes too.
	if err := s.tel.ExportMetrics(c.Context, reg); err != nil {
		return nil, usagef("%v", err)
	}
	return reg, nil
}

// serveMetrics serves /metrics and /healthz (plus extra handlers) on addr;
// "" serves nothing. With a handler at "/" it serves spool dev's monitor,
// whose address is --addr; otherwise --metrics-addr.
func serveMetrics(addr string, reg *prometheus.Registry, extra map[string]http.Handler) (func(), error) {
	if addr == "" {
		return func() {}, nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	for p, h := range extra {
		mux.Handle(p, h)
	}
	what, flag := "metrics", "--metrics-addr"
	if extra["/"] != nil {
		what, flag = "monitor", "--addr"
	}
	ln, err := listen(what, addr, flag)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			fmt.Fprintln(os.Stderr, "spool: metrics server:", err)
		}
	}()
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
