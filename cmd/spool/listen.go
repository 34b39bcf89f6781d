package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"syscall"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/httpauth"
)

// serverFlags are the listen address and credential flags of a server
// command, read from SPOOL_<env>_ADDR, _BASIC_AUTH and _TOKEN too;
// tokenHow says how a client presents the token.
func serverFlags(env, addr, tokenHow string) []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "addr", Value: addr, EnvVars: []string{"SPOOL_" + env + "_ADDR"}, Usage: "listen address"},
		&cli.StringFlag{Name: "basic-auth", EnvVars: []string{"SPOOL_" + env + "_BASIC_AUTH"}, Usage: "require HTTP basic auth `USER:PASS`"},
		&cli.StringFlag{Name: "token", EnvVars: []string{"SPOOL_" + env + "_TOKEN"}, Usage: "require `TOKEN` " + tokenHow},
	}
}

// serverAuth reads --basic-auth and --token of a server command, and
// refuses (bad usage) a non-loopback --addr without either unless open
// says it may serve open (the hint says how).
func serverAuth(c *cli.Context, open bool, hint string) (httpauth.Auth, error) {
	var a httpauth.Auth
	if s := c.String("basic-auth"); s != "" {
		b, err := httpauth.ParseBasicAuth(s)
		if err != nil {
			return a, usagef("--basic-auth: want USER:PASS, both non-empty")
		}
		a = b
	}
	if t := c.String("token"); t != "" {
		if len(t) < httpauth.MinTokenLength {
			return a, usagef("--token: use at least %d characters", httpauth.MinTokenLength)
		}
		a.Token = t
	}
	addr := c.String("addr")
	loop, err := httpauth.IsLoopback(addr)
	if err != nil {
		return a, usagef("--addr %q: want HOST:PORT", addr)
	}
	if !loop && !a.Enabled() && !open {
		return a, usagef("--addr %s is not a loopback address: set --basic-auth or --token%s", addr, hint)
	}
	return a, nil
}

// serveHTTP serves h on ln until the command's context ends (Ctrl-C,
// SIGTERM), then shuts the server down: the requests' contexts end (so
// that long responses such as event streams return) and requests in
// flight get up to five seconds.
func serveHTTP(c *cli.Context, name string, ln net.Listener, h http.Handler) error {
	base, stop := context.WithCancel(context.Background())
	defer stop()
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, BaseContext: func(net.Listener) context.Context { return base }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("%s: %w", name, err)
		}
		return nil
	case <-c.Done():
	}
	stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(ctx)
	return nil
}

// listen listens on addr for the server what ("monitor", "api",
// "metrics"), whose address flag sets: an address another process holds
// is said as such, naming the server and the flag that moves it, rather
// than as the bind error alone.
func listen(what, addr, flag string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("%s: %s is already in use (another spool process, or another program, listens there): serve the %s elsewhere with %s HOST:PORT",
			what, addr, what, flag)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return ln, nil
}
