package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
)

// TestSpoolMCPWithoutRedis: `spool mcp` started while its Redis is
// unreachable answers the MCP handshake and lists its tools, and each tool
// call fails with the reason, rather than dying before the client could
// learn why.
func TestSpoolMCPWithoutRedis(t *testing.T) {
	t.Parallel()
	bin := spooltest.Binary(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.Command(bin, "mcp")
	cmd.Dir = t.TempDir()
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SPOOL_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "SPOOL_REDIS_URL=redis://127.0.0.1:1", "GORACE=atexit_sleep_ms=0")
	stderr, err := os.Create(filepath.Join(t.TempDir(), "spool-mcp.stderr"))
	require.NoError(t, err)
	defer stderr.Close()
	cmd.Stderr = stderr
	sess, err := mcp.NewClient(&mcp.Implementation{Name: "e2e", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	require.NoError(t, err, "the handshake is answered")
	defer func() { require.NoError(t, sess.Close(), "spool mcp exits 0 when the client leaves") }()
	n := 0
	for _, err := range sess.Tools(ctx, nil) {
		require.NoError(t, err)
		n++
	}
	require.Greater(t, n, 0)
	res, err := sess.CallTool(ctx, &mcp.CallToolParams{Name: "run_thread", Arguments: map[string]any{"directive": "demo/hello"}})
	require.NoError(t, err)
	require.True(t, res.IsError)
	require.Contains(t, resultText(res), "spool cannot serve this call: redis redis://127.0.0.1:1")
	require.Contains(t, resultText(res), "connection refused")
	b, err := os.ReadFile(stderr.Name())
	require.NoError(t, err)
	require.Contains(t, string(b), "spool: mcp: redis redis://127.0.0.1:1", "the reason is on stderr too")
}
