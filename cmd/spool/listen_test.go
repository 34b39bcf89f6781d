package main

import (
	"net"
	"net/http"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// A port another process holds is said as such, naming the server and the
// flag that moves it: spool monitor's and spool api's --addr, spool dev's
// monitor (--addr), a worker's --metrics-addr.
func TestBusyPortNamesServerAndFlag(t *testing.T) {
	t.Parallel()
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	addr := busy.Addr().String()

	_, err = listen("monitor", addr, "--addr")
	require.EqualError(t, err, "monitor: "+addr+" is already in use (another spool process, or another program, listens there): "+
		"serve the monitor elsewhere with --addr HOST:PORT")

	_, err = serveMetrics(addr, prometheus.NewRegistry(), map[string]http.Handler{"/": http.NotFoundHandler()})
	require.ErrorContains(t, err, "monitor: "+addr+" is already in use")
	require.ErrorContains(t, err, "with --addr HOST:PORT")

	_, err = serveMetrics(addr, prometheus.NewRegistry(), nil)
	require.ErrorContains(t, err, "metrics: "+addr+" is already in use")
	require.ErrorContains(t, err, "with --metrics-addr HOST:PORT")

	_, err = listen("api", "127.0.0.1:bogus", "--addr")
	require.ErrorContains(t, err, "api: listen tcp")
}
