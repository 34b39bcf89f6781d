package mcpserver_test

import (
	"context"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/mcpserver"
)

// With spool's services unreachable the server still answers the
// handshake and lists its tools; every call is a tool error that says why.
func TestUnavailableFailsEachCallWithTheReason(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv, err := mcpserver.New(mcpserver.Config{Project: t.TempDir(),
		Unavailable: errors.New("redis redis://127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused")})
	require.NoError(t, err)
	st, ct := mcp.NewInMemoryTransports()
	ss, err := srv.Connect(ctx, st, nil)
	require.NoError(t, err)
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	require.NoError(t, err)
	defer cs.Close()

	n := 0
	for tl, err := range cs.Tools(ctx, nil) {
		require.NoError(t, err)
		require.NotEmpty(t, tl.Name)
		n++
	}
	require.GreaterOrEqual(t, n, 7)
	for _, call := range []*mcp.CallToolParams{
		{Name: "run_thread", Arguments: map[string]any{"directive": "demo/hello"}},
		{Name: "show_thread", Arguments: map[string]any{"thread_id": "x"}},
	} {
		res, err := cs.CallTool(ctx, call)
		require.NoError(t, err, call.Name)
		require.True(t, res.IsError, call.Name)
		require.Len(t, res.Content, 1)
		require.Equal(t, "spool cannot serve this call: redis redis://127.0.0.1:1: dial tcp 127.0.0.1:1: connect: connection refused "+
			"(restart spool mcp once it is fixed)", res.Content[0].(*mcp.TextContent).Text)
	}
	_, err = mcpserver.New(mcpserver.Config{Project: "p"})
	require.EqualError(t, err, "mcpserver: Config.Orch is required")
}
