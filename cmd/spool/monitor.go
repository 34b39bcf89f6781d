package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/monitor"
)

func monitorCommand() *cli.Command {
	return &cli.Command{
		Name:  "monitor",
		Usage: "asynqmon UI + thread views",
		Description: "Serves asynqmon under /asynq/ and spool's thread views (threads by status, a thread's tree,\n" +
			"budget and live transcript), /metrics and /healthz. Binds to loopback unless told otherwise;\n" +
			"a non-loopback --addr needs --basic-auth or --token (or --insecure).",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "addr", Value: "127.0.0.1:8080", EnvVars: []string{"SPOOL_MONITOR_ADDR"}, Usage: "listen address"},
			&cli.StringFlag{Name: "basic-auth", EnvVars: []string{"SPOOL_MONITOR_BASIC_AUTH"}, Usage: "require HTTP basic auth `USER:PASS`"},
			&cli.StringFlag{Name: "token", EnvVars: []string{"SPOOL_MONITOR_TOKEN"}, Usage: "require `TOKEN` (Authorization: Bearer, or ?token= once in a browser)"},
			&cli.BoolFlag{Name: "insecure", Usage: "allow a non-loopback --addr without authentication"},
			&cli.BoolFlag{Name: "read-only", EnvVars: []string{"SPOOL_MONITOR_READ_ONLY"}, Usage: "asynqmon in view-only mode (no delete, pause, run)"},
		},
		Action: runMonitor,
	}
}

// monitorOptions are the settings of the monitor beyond the services.
type monitorOptions struct {
	auth     monitor.Auth
	hosts    []string // allowed Host names; nil: any
	readOnly bool
	registry *prometheus.Registry // nil: a new one
}

// newMonitorHandlerWith is the monitor's handler over s.
func newMonitorHandlerWith(s *services, o monitorOptions) (http.Handler, error) {
	return monitor.New(monitor.Config{
		Orch:         s.orch,
		Store:        s.store,
		AsynqHandler: monitor.NewAsynqmon(s.rdb, monitor.AsynqPath, o.readOnly),
		Auth:         o.auth,
		Hosts:        o.hosts,
		Registry:     o.registry,
		Logger:       s.log,
	})
}

// monitorAuth reads --basic-auth and --token.
func monitorAuth(c *cli.Context) (monitor.Auth, error) {
	var a monitor.Auth
	if s := c.String("basic-auth"); s != "" {
		b, err := monitor.ParseBasicAuth(s)
		if err != nil {
			return a, usagef("--basic-auth: want USER:PASS, both non-empty")
		}
		a = b
	}
	if t := c.String("token"); t != "" {
		if len(t) < 8 {
			return a, usagef("--token: use at least 8 characters")
		}
		a.Token = t
	}
	return a, nil
}

// isLoopback reports whether a listen address only accepts local
// connections: a loopback IP or "localhost". An empty host (all
// interfaces) is not.
func isLoopback(addr string) (bool, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false, err
	}
	if strings.EqualFold(host, "localhost") {
		return true, nil
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback(), nil
}

// loopbackHosts are the Host names a monitor on a loopback addr answers
// (against DNS rebinding); nil, any, for another addr.
func loopbackHosts(addr string) []string {
	if loop, err := isLoopback(addr); err != nil || !loop {
		return nil
	}
	host, _, _ := net.SplitHostPort(addr)
	return append(append([]string{}, monitor.LoopbackHosts...), host)
}

func runMonitor(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("monitor takes no arguments")
	}
	addr := c.String("addr")
	auth, err := monitorAuth(c)
	if err != nil {
		return err
	}
	loop, err := isLoopback(addr)
	if err != nil {
		return usagef("--addr %q: want HOST:PORT", addr)
	}
	if !loop && !auth.Enabled() && !c.Bool("insecure") {
		return usagef("--addr %s is not a loopback address: set --basic-auth or --token, or --insecure to serve it open", addr)
	}
	s, err := openServices(c, openOpts{readOnly: true}) // it signs nothing: public keys suffice
	if err != nil {
		return err
	}
	defer s.Close()
	reg := processRegistry()
	o := monitorOptions{auth: auth, readOnly: c.Bool("read-only"), registry: reg, hosts: loopbackHosts(addr)}
	h, err := newMonitorHandlerWith(s, o)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("monitor: %w", err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	fmt.Fprintf(c.App.ErrWriter, "spool monitor: http://%s/ (asynqmon at %s/)\n", ln.Addr(), monitor.AsynqPath)
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("monitor: %w", err)
		}
		return nil
	case <-c.Context.Done():
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	return nil
}
