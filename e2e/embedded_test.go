package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
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
	exampleProject(t, project)
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

	// The example graph: a foreach of child threads, a branch, a return.
	rec, _ = run("graph", "run", "demo/review", "--inputs-json", `{"topics": ["a", "b", "c"]}`, "--embedded", "--wait", "--json")
	require.Equal(t, "completed", rec["status"], rec)
	require.Equal(t, "graph", rec["kind"], rec)
	require.Equal(t, map[string]any{"ok": true, "reviewed": 3.0, "verdict": "all 3 topics reviewed"}, rec["outputs"], rec)

	// A thread that fails: its error is the one line on stderr (the
	// miniredis notice comes with a result only).
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "--project", project, "thread", "run", "demo/hello", "--limit", "turns=1", "--embedded", "--wait", "--json")
	cmd.Env = []string{"PATH=" + empty, "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0"}
	var stderr2 strings.Builder
	cmd.Stderr = &stderr2
	var ee *exec.ExitError
	require.ErrorAs(t, cmd.Run(), &ee)
	require.Equal(t, 1, ee.ExitCode())
	require.Regexp(t, `^spool: thread demo/hello-\S+ ended error: turns_exceeded: [^\n]*\n$`, stderr2.String())
}

// TestEmbeddedStateWithoutDev: with SPOOL_REDIS_URL unset and no `spool
// dev` running, the commands that read or act on threads open the data
// dir's embedded Redis (CLI.md: unset → embedded), so an --embedded
// run's thread can be shown, verified and resumed afterwards; a thread
// run without --embedded and the servers, whose work needs a worker,
// still say there is no Redis.
func TestEmbeddedStateWithoutDev(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("SPOOL_TEST_REQUIRE_REAL") != "" {
			t.Fatal("SPOOL_TEST_REQUIRE_REAL=1 but no redis-server on PATH")
		}
		t.Skip("no redis-server on PATH: the embedded Redis keeps nothing between processes")
	}
	bin := spooltest.Binary(t)
	project := t.TempDir()
	exampleProject(t, project)
	home := t.TempDir()
	run := func(args ...string) (code int, stdout, stderr string) {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"--project", project}, args...)...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "GORACE=atexit_sleep_ms=0", "SPOOL_LOG_LEVEL=error"}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String(), errb.String()
		}
		require.NoError(t, err)
		return 0, out.String(), errb.String()
	}
	record := func(stdout string) map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(stdout), &m), stdout)
		return m
	}

	code, out, errs := run("thread", "list", "--json")
	require.Equal(t, 1, code, "nothing ran here yet: %s", errs)
	require.Empty(t, out)
	require.Regexp(t, "^spool: no Redis: set SPOOL_REDIS_URL", errs)
	require.NoDirExists(t, filepath.Join(project, ".spool"), "a read makes no data dir")

	code, out, errs = run("thread", "run", "demo/hello", "--embedded", "--wait", "--json")
	require.Equal(t, 0, code, errs)
	id := record(out)["thread_id"].(string)

	code, out, errs = run("thread", "show", id, "--json")
	require.Equal(t, 0, code, errs)
	require.Equal(t, "completed", record(out)["status"])
	code, out, errs = run("thread", "verify", id, "--json")
	require.Equal(t, 0, code, errs)
	require.Equal(t, true, record(out)["verified"])
	code, _, errs = run("thread", "show", "no-such-thread")
	require.Equal(t, 1, code)
	require.Equal(t, "spool: thread \"no-such-thread\" not found in the embedded Redis of "+filepath.Join(project, ".spool")+"\n", errs)
	code, out, errs = run("thread", "resume", id, "--message", "again", "--json")
	require.Equal(t, 0, code, errs)
	require.Equal(t, true, record(out)["resumed"], "kept in the data dir until a worker runs it")
	resumed := record(out)["new_thread_id"].(string)

	// No worker runs on the data dir, and none could start while a wait
	// held its Redis: waiting or following says so at once.
	for _, args := range [][]string{{"thread", "wait", resumed}, {"thread", "wait", id}, {"thread", "transcript", resumed, "--follow"}} {
		code, out, errs = run(args...)
		require.Equal(t, 1, code, "spool %v: %s", args, errs)
		require.Empty(t, out)
		require.Regexp(t, "^spool: ("+regexp.QuoteMeta(resumed)+"|"+regexp.QuoteMeta(id)+") not finished, and no worker runs on .*: start `spool dev` there, then (wait|follow)", errs)
	}

	for _, args := range [][]string{{"thread", "run", "demo/hello"}, {"worker"}} {
		code, out, errs = run(args...)
		require.Equal(t, 1, code, "spool %v: %s", args, errs)
		require.Empty(t, out)
		require.Regexp(t, "^spool: no Redis: set SPOOL_REDIS_URL", errs)
	}
}

// TestEmbeddedServesItsQueue: --embedded runs the thread in the process
// whatever its --queue, children (on the same queue) included, instead of
// leaving it for a worker that serves that queue.
func TestEmbeddedServesItsQueue(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: cliProject()})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	res := e.SpoolContext(ctx, quietEnv(), "thread", "run", "t/cli", "--model", "script:scripts/cli.yaml", "--input", "name=q",
		"--queue", "special", "--embedded", "--wait", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Empty(t, res.Stderr, "no warning that no worker serves the queue")
	m := requireRecord(t, jsonValue(t, res.Stdout), "completed")
	require.Equal(t, "special", m["queue"])
}
