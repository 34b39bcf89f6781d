package worker

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/mcpclient"
)

// TestNewRefusesABadConfig: New names the bad field (a queue no worker
// could serve, a weight of nothing, an MCP setting) before it wires
// anything.
func TestNewRefusesABadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg Config
		err string
	}{
		{Config{Queues: map[string]int{"{bad}": 1}}, "worker config: Queues: queue"},
		{Config{Queues: map[string]int{"default": -1}}, "default=-1: the weight must be positive"},
		{Config{MCP: mcpclient.Config{PassEnv: []string{"A=B"}}, Logger: slog.New(slog.DiscardHandler)},
			"worker config: MCP: mcpclient config: PassEnv"},
	} {
		_, err := New(tc.cfg, nil)
		require.ErrorContains(t, err, tc.err)
	}
}
