package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/spooltest"
)

// TestEmbeddedWithNothingInstalled runs README's main command — `spool
// thread run demo/hello --embedded --wait` on the examples project — with
// nothing on PATH (no redis-server, so the in-process miniredis) and no
// SPOOL_ settings (so the local blob store under the project), then the
// tree example, whose children run on the same in-process worker.
func TestEmbeddedWithNothingInstalled(t *testing.T) {
	t.Parallel()
	bin := spooltest.Binary(t)
	project := t.TempDir()
	require.NoError(t, os.CopyFS(project, os.DirFS(filepath.Join("..", "examples"))))
	empty := t.TempDir()
	run := func(args ...string) (map[string]any, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--project", project}, args...)...)
		cmd.Env = []string{"PATH=" + empty, "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0"}
		var stdout, stderr strings.Builder
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		require.NoError(t, cmd.Run(), "stderr:\n%s", stderr.String())
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout.String()), &rec), stdout.String())
		return rec, stderr.String()
	}

	rec, stderr := run("thread", "run", "demo/hello", "--embedded", "--wait", "--json")
	require.Equal(t, "completed", rec["status"], rec)
	require.Contains(t, stderr, "miniredis", "no redis-server on PATH: the embedded fallback")
	require.DirExists(t, filepath.Join(project, ".spool"), "the local blob store in the project")

	rec, _ = run("thread", "run", "demo/tree", "--input", "level=0", "--input", "depth=2", "--embedded", "--wait", "--json")
	require.Equal(t, "completed", rec["status"], rec)
	require.Greater(t, rec["cost"].(map[string]any)["turns"].(float64), 1.0)
}
