package main

import (
	"fmt"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/httpauth"
)

func apiCommand() *cli.Command {
	return &cli.Command{
		Name:  "api",
		Usage: "HTTP/JSON API + server-sent events",
		Description: "Serves the thread operations as JSON over HTTP (run, list, show, tree, chain, budget, cancel,\n" +
			"resume, fork, approvals, approve, deny, send, interrupt) and a thread's\n" +
			"transcript as server-sent events at /v1/threads/ID/events. The OpenAPI document is at /v1/openapi.json.\n" +
			"Binds to loopback unless told otherwise; a non-loopback --addr needs --basic-auth, --token or --tokens.\n" +
			"With --tokens FILE every request needs a listed bearer token (loopback included); a token bound to a\n" +
			"tenant sees and starts that tenant's runs only (docs/configuration.md, \"API tokens\").\n" +
			"Root threads are started from the project directory (--project), as `spool thread run` does.",
		Flags: append(serverFlags("API", "127.0.0.1:8081", "as Authorization: Bearer TOKEN"),
			metricsAddrFlag(" (requests by route, spool_api_*)", ":9092"),
			&cli.IntFlag{Name: "max-streams", EnvVars: []string{"SPOOL_API_MAX_STREAMS"}, Value: 256,
				Usage: "the most event streams open at once; past it a stream is refused with 429"},
			&cli.IntFlag{Name: "max-streams-per-client", EnvVars: []string{"SPOOL_API_MAX_STREAMS_PER_CLIENT"}, Value: 32,
				Usage: "the most event streams one client (basic auth user, else address) holds open"},
			&cli.StringFlag{Name: "tokens", EnvVars: []string{"SPOOL_API_TOKENS"},
				Usage: "tokens `FILE` (YAML: tokens: [{name, sha256, tenant}]): every request needs a listed bearer token; a token with a tenant is bound to it"}),
		Action: runAPI,
	}
}

func runAPI(c *cli.Context) error {
	if err := noArgs(c); err != nil {
		return err
	}
	var tokens []api.Token
	if f := c.String("tokens"); f != "" {
		var err error
		if tokens, err = api.LoadTokens(f); err != nil {
			return usagef("--tokens: %v", err)
		}
	}
	auth, err := serverAuth(c, len(tokens) > 0, "")
	if err != nil {
		return err
	}
	for _, f := range []string{"max-streams", "max-streams-per-client"} {
		if c.Int(f) < 1 {
			return usagef("--%s %d: want at least 1", f, c.Int(f))
		}
	}
	// Cancel and resume sign transcript events: the signing key is needed.
	s, err := openServices(c, openOpts{noEmbedded: true})
	if err != nil {
		return err
	}
	defer s.Close()
	addr := c.String("addr")
	reg, err := processRegistry(c, s)
	if err != nil {
		return err
	}
	h, err := api.New(api.Config{Orch: s.orch, Project: s.project, UserDir: s.userDir, Auth: auth, Tokens: tokens, Hosts: httpauth.LoopbackHosts(addr),
		Registry: reg, Logger: s.log, MaxStreams: c.Int("max-streams"), MaxStreamsPerClient: c.Int("max-streams-per-client")})
	if err != nil {
		return err
	}
	stopMetrics, err := serveMetrics(c.String("metrics-addr"), reg, nil)
	if err != nil {
		return err
	}
	defer stopMetrics()
	ln, err := listen("api", addr, "--addr")
	if err != nil {
		return err
	}
	fmt.Fprintf(c.App.ErrWriter, "spool api: http://%s/v1/ (OpenAPI at /v1/openapi.json)\n", ln.Addr())
	return serveHTTP(c, "api", ln, h)
}
