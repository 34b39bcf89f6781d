package main

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/httpauth"
	"github.com/spool-run/spool/monitor"
)

func monitorCommand() *cli.Command {
	return &cli.Command{
		Name:  "monitor",
		Usage: "asynqmon UI + thread views",
		Description: "Serves asynqmon under /asynq/ and spool's thread views (threads by status, a thread's tree,\n" +
			"budget, live transcript and timeline), the approvals inbox and the thread actions (approve, deny,\n" +
			"send, interrupt; cancel and resume with --sign), /metrics and /healthz. Binds to loopback unless\n" +
			"told otherwise; a non-loopback --addr needs --basic-auth or --token (or --insecure).",
		Flags: append(serverFlags("MONITOR", "127.0.0.1:8080", "(Authorization: Bearer, or ?token= once in a browser)"),
			&cli.BoolFlag{Name: "insecure", Usage: "allow a non-loopback --addr without authentication"},
			&cli.BoolFlag{Name: "read-only", EnvVars: []string{"SPOOL_MONITOR_READ_ONLY"}, Usage: "take no action: asynqmon in view-only mode (no delete, pause, run), no approve, deny, send, interrupt, cancel or resume"},
			&cli.BoolFlag{Name: "sign", EnvVars: []string{"SPOOL_MONITOR_SIGN"}, Usage: "hold the signing key (the data dir's, or --signing-key), so that thread pages offer cancel and resume, which sign what they write; without it the monitor holds public keys only"},
			&cli.StringFlag{Name: "session-key", EnvVars: []string{"SPOOL_MONITOR_SESSION_KEY"}, Usage: "a `SECRET` of at least " + strconv.Itoa(minSessionKey) +
				" characters that signs the one-line outcome an action leaves for the next page (set it in the environment): monitors behind one load balancer, and a monitor across restarts, show each other's when they share it; default: random per process"},
		),
		Action: runMonitor,
	}
}

// monitorOptions are the settings of the monitor beyond the services.
type monitorOptions struct {
	auth     monitor.Auth
	hosts    []string // allowed Host names; nil: any
	readOnly bool
	registry *prometheus.Registry // nil: a new one
	// sessionKey signs the actions' flash messages; nil: random per
	// process.
	sessionKey []byte
}

// minSessionKey is the shortest --session-key taken: it is an HMAC key.
const minSessionKey = 16

// newMonitorHandlerWith is the monitor's handler over s.
func newMonitorHandlerWith(s *services, o monitorOptions) (http.Handler, error) {
	return monitor.New(monitor.Config{
		Orch:         s.orch,
		AsynqHandler: monitor.NewAsynqmon(s.rdb, monitor.AsynqPath, o.readOnly),
		ReadOnly:     o.readOnly,
		Auth:         o.auth,
		Hosts:        o.hosts,
		Registry:     o.registry,
		Project:      s.project,
		SessionKey:   o.sessionKey,
		Logger:       s.log,
	})
}

func runMonitor(c *cli.Context) error {
	if c.NArg() > 0 {
		return usagef("monitor takes no arguments")
	}
	addr := c.String("addr")
	auth, err := serverAuth(c, c.Bool("insecure"), ", or --insecure to serve it open")
	if err != nil {
		return err
	}
	key := c.String("session-key")
	if key != "" && len(key) < minSessionKey {
		return usagef("--session-key: use at least %d characters", minSessionKey)
	}
	// It signs nothing unless --sign: public keys suffice.
	s, err := openServices(c, openOpts{readOnly: !c.Bool("sign"), noEmbedded: true})
	if err != nil {
		return err
	}
	defer s.Close()
	reg, err := processRegistry(c, s)
	if err != nil {
		return err
	}
	o := monitorOptions{auth: auth, readOnly: c.Bool("read-only"), registry: reg, hosts: httpauth.LoopbackHosts(addr)}
	if key != "" {
		o.sessionKey = []byte(key)
	}
	h, err := newMonitorHandlerWith(s, o)
	if err != nil {
		return err
	}
	ln, err := listen("monitor", addr, "--addr")
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "spool monitor: http://%s/ (asynqmon at %s/)\n", ln.Addr(), monitor.AsynqPath)
	return serveHTTP(c, "monitor", ln, h)
}
