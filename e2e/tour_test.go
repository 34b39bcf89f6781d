package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// tourBlock returns the commands of README's tour: the lines of the first
// sh block under "## A tour", without comments and blank lines.
func tourBlock(t *testing.T) []string {
	t.Helper()
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	_, tour, ok := strings.Cut(string(readme), "\n## A tour\n")
	require.True(t, ok, "README has no tour")
	_, block, ok := strings.Cut(tour, "```sh\n")
	require.True(t, ok, "the tour has no sh block")
	block, _, ok = strings.Cut(block, "\n```")
	require.True(t, ok)
	var lines []string
	for _, line := range strings.Split(block, "\n") {
		if i := strings.Index(line, " #"); i >= 0 {
			line = line[:i]
		}
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			lines = append(lines, line)
		}
	}
	return lines
}

// tourShell runs the tour's lines as a user's terminals would: one working
// directory and environment, which `cd` and `export` change, and the
// servers (`spool dev`, `spool api`) left running in their own.
type tourShell struct {
	t     *testing.T
	dir   string
	env   []string
	procs []*exec.Cmd
	logs  []*syncBuffer
}

// syncBuffer is what a server wrote so far.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// command is line run by sh in the shell's directory and environment.
func (sh *tourShell) command(ctx context.Context, line string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "sh", "-c", line)
	cmd.Dir, cmd.Env = sh.dir, sh.env
	return cmd
}

// run runs line to its end and returns its stdout; it must exit 0.
func (sh *tourShell) run(line string) string {
	sh.t.Helper()
	ctx, cancel := context.WithTimeout(sh.t.Context(), 3*time.Minute)
	defer cancel()
	cmd := sh.command(ctx, line)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	require.NoError(sh.t, cmd.Run(), "%s\nstdout:\n%s\nstderr:\n%s", line, out.String(), errb.String())
	return out.String()
}

// start starts line, a server, and waits until ready says it is.
func (sh *tourShell) start(line string, ready func(log string) bool) string {
	sh.t.Helper()
	cmd := sh.command(context.Background(), "exec "+line)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(sh.t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	sh.procs, sh.logs = append(sh.procs, cmd), append(sh.logs, log)
	sh.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if sh.t.Failed() {
			sh.t.Logf("%s:\n%s", line, log.String())
		}
	})
	require.Eventually(sh.t, func() bool {
		select {
		case <-done:
			return true
		default:
			return ready(log.String())
		}
	}, 2*time.Minute, 50*time.Millisecond)
	select {
	case <-done:
		sh.t.Fatalf("%s exited:\n%s", line, log.String())
	default:
	}
	return log.String()
}

// spoolJSON runs a spool command of the test's own (not the tour's) in the
// shell and decodes its JSON.
func tourJSON[T any](sh *tourShell, args string) T {
	sh.t.Helper()
	var v T
	out := sh.run("spool " + args)
	require.NoError(sh.t, json.Unmarshal([]byte(out), &v), out)
	return v
}

// treeSpend is the spend of every thread of n's tree.
func treeSpend(n *orchestrator.TreeNode) (sum float64, threads int) {
	sum, threads = n.Spend, 1
	for _, k := range append(append(n.Children, n.Forks...), n.Continuation) {
		if k != nil {
			s, c := treeSpend(k)
			sum, threads = sum+s, threads+c
		}
	}
	return sum, threads
}

// newThreadID finds the thread a resume or a fork started in its output.
var newThreadID = regexp.MustCompile(` as (\S+) \(`)

// TestReadmeTour runs README's tour as written, each line in turn, from a
// fresh copy of the repository's example project: the build line (as the
// test's spool binary at bin/spool), `export`, `cd examples`, `spool
// keys init`, `spool dev` (left running, as in its own terminal), every
// thread command with ID the tree's root, and `spool api`; with nothing
// set up beforehand (no SPOOL_ setting, an empty HOME). Between lines it
// waits for what the last one started to finish, as a reader would, and
// reads the outputs as a user would: the tree has four levels, its budget
// adds up, the resume carries what the tree has left.
func TestReadmeTour(t *testing.T) {
	t.Parallel()
	lines := tourBlock(t)
	clone := t.TempDir()
	exampleProject(t, filepath.Join(clone, "examples"))
	devPort, err := testenv.FreePort()
	require.NoError(t, err)
	apiPort, err := testenv.FreePort()
	require.NoError(t, err)
	sh := &tourShell{t: t, dir: clone, env: []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "GORACE=atexit_sleep_ms=0",
		// Free ports instead of the defaults the tour's servers take.
		fmt.Sprintf("SPOOL_DEV_ADDR=127.0.0.1:%d", devPort), fmt.Sprintf("SPOOL_API_ADDR=127.0.0.1:%d", apiPort),
	}}
	project := filepath.Join(clone, "examples")

	var id, run, rel string
	var remaining float64
	ran := map[string]bool{}
	for _, line := range lines {
		if strings.Contains(line, "ID") {
			require.NotEmpty(t, id, "%q comes before the tour names a thread", line)
			line = regexp.MustCompile(`\bID\b`).ReplaceAllLiteralString(line, id)
		}
		if strings.Contains(line, " RUN") && !strings.Contains(line, "graph run ") {
			require.NotEmpty(t, run, "%q comes before the tour names a graph run", line)
			line = regexp.MustCompile(`\bRUN\b`).ReplaceAllLiteralString(line, run)
		}
		if strings.Contains(line, " REL") && !strings.Contains(line, "graph run ") {
			require.NotEmpty(t, rel, "%q comes before the tour starts demo/release", line)
			line = regexp.MustCompile(`\bREL\b`).ReplaceAllLiteralString(line, rel)
		}
		args := strings.Fields(line)
		cmd := strings.Join(args[:min(3, len(args))], " ")
		ran[cmd] = true
		switch {
		case line == "go build -o bin/spool ./cmd/spool":
			// What it builds: this test's binary.
			require.NoError(t, os.MkdirAll(filepath.Join(sh.dir, "bin"), 0o755))
			require.NoError(t, os.Symlink(spooltest.Binary(t), filepath.Join(sh.dir, "bin", "spool")))
		case args[0] == "export":
			name, _, _ := strings.Cut(args[1], "=")
			sh.env = append(sh.env, name+"="+strings.TrimSpace(sh.run(line+"; printenv "+name)))
		case args[0] == "cd":
			sh.dir = filepath.Join(sh.dir, args[1])
			require.DirExists(t, sh.dir)
		case line == "spool dev":
			log := sh.start(line, func(log string) bool { return strings.Contains(log, "Ctrl-C stops it.") })
			require.Contains(t, log, "  data       "+filepath.Join(project, ".spool")+"\n")
		case line == "spool api":
			sh.start(line, func(string) bool {
				resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/v1/openapi.json", apiPort))
				if err == nil {
					_ = resp.Body.Close()
				}
				return err == nil && resp.StatusCode == http.StatusOK
			})
		default:
			require.Equal(t, "spool", args[0], "a tour line the test does not know: %s", line)
			out := sh.run(line)
			switch cmd {
			case "spool keys init":
				require.FileExists(t, filepath.Join(project, ".spool", "keys", "signing.key"), "the key is where the tour's commands use it")
			case "spool thread run":
				if strings.Contains(line, "demo/hello") {
					require.Contains(t, out, "status     completed")
					require.Contains(t, out, `{"greeting":"hello, Ada"}`)
					break
				}
				var rec registry.Record
				require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
				id = rec.ThreadID
				sh.run("spool thread wait " + id + " --timeout 2m")
				tree := tourJSON[orchestrator.TreeNode](sh, "thread tree "+id+" --json")
				spent, threads := treeSpend(&tree)
				require.Equal(t, 4, threads, "demo/tree with depth 3 builds levels 0 to 3")
				b := tourJSON[orchestrator.Budget](sh, "budget show "+id+" --json")
				require.InDelta(t, spent, b.Actual, 1e-9, "the root's budget is the tree's spend")
				remaining = b.Remaining
			case "spool thread tree":
				require.Equal(t, 4, strings.Count(out, "completed"), out)
				require.Contains(t, out, "subtree $", "each node shows its live subtree spend")
			case "spool budget show":
				require.Contains(t, out, "├─ ", "the root's budget lists its child")
			case "spool thread transcript":
				if strings.Contains(line, "--follow") {
					require.Contains(t, out, "[thread_completed]", "followed to its end")
				} else {
					require.Contains(t, out, "# "+id)
				}
			case "spool thread verify":
				require.Contains(t, out, id+": verified ")
			case "spool thread resume", "spool thread fork":
				m := newThreadID.FindStringSubmatch(out)
				require.NotNil(t, m, out)
				sh.run("spool thread wait " + m[1] + " --timeout 2m")
				if cmd == "spool thread resume" {
					rec := tourJSON[registry.Record](sh, "thread show "+m[1]+" --json")
					require.InDelta(t, remaining, rec.Limits.Spend, 1e-9, "the resume goes on with what the tree has left")
				}
			case "spool graph run":
				var rec registry.Record
				require.NoError(t, json.Unmarshal([]byte(out), &rec), out)
				if strings.Contains(line, "demo/release") {
					// It sleeps, then waits for the message the tour sends.
					rel = rec.ThreadID
					require.Eventually(t, func() bool {
						return tourJSON[registry.Record](sh, "thread show "+rel+" --json").WaitingFor == registry.WaitingForMessage
					}, time.Minute, 200*time.Millisecond, "demo/release comes to wait for its message")
					break
				}
				run = rec.ThreadID
				sh.run("spool thread wait " + run + " --timeout 2m")
				tree := tourJSON[orchestrator.TreeNode](sh, "thread tree "+run+" --json")
				spent, threads := treeSpend(&tree)
				require.Equal(t, 5, threads, "the run and its four reviews")
				b := tourJSON[orchestrator.Budget](sh, "budget show "+run+" --json")
				require.InDelta(t, spent, b.Actual, 1e-9, "the run's budget is its children's spend")
			case "spool graph show":
				if strings.Contains(line, rel) && rel != "" {
					require.Contains(t, out, "waiting    for message deploy_finished (spool graph send "+rel+" deploy_finished --data JSON)")
					break
				}
				for _, want := range []string{"plan", "review", "approved", "needs_work", "4/4 done", "not_reached", "status     completed"} {
					require.Contains(t, out, want)
				}
			case "spool thread pause":
				require.Contains(t, out, rel+"  paused (1 run)", "a run waiting for its message is paused at once")
				require.Equal(t, thread.StatusPaused, tourJSON[registry.Record](sh, "thread show "+rel+" --json").Status)
			case "spool thread unpause":
				require.Contains(t, out, rel+"  unpaused (status waiting")
				require.Equal(t, registry.WaitingForMessage, tourJSON[registry.Record](sh, "thread show "+rel+" --json").WaitingFor)
			case "spool graph send":
				require.Contains(t, out, "the run was waiting for it and goes on")
				sh.run("spool thread wait " + rel + " --timeout 2m")
				done := tourJSON[registry.Record](sh, "thread show "+rel+" --json")
				require.Equal(t, "https://staging.example", done.Outputs["url"], "the message's data reached the run")
			case "spool graph replay":
				require.Contains(t, out, "every step took the recorded edge")
			case "spool graph state":
				require.Contains(t, out, `"planned": 4`)
			case "spool thread export-script":
				require.FileExists(t, filepath.Join(project, "scripts", "fixture.yaml"))
			case "spool thread replay":
				require.Contains(t, out, "replayed "+id)
			}
		}
	}
	for _, cmd := range []string{"spool keys init", "spool dev", "spool thread run", "spool thread tree", "spool budget show",
		"spool thread transcript", "spool thread verify", "spool thread resume", "spool thread fork",
		"spool thread export-script", "spool thread replay", "spool thread cancel", "spool graph run", "spool graph show",
		"spool graph state", "spool graph send", "spool graph replay", "spool thread pause", "spool thread unpause", "spool api"} {
		require.True(t, ran[cmd], "the tour no longer runs %s: this test's checks need it", cmd)
	}
}

// TestNotFoundSaysWhere: a directive that is not found names the
// directories it was looked for in and the project, so that a user who
// ran the tour outside examples/ knows what to change; a thread that is
// not found names the Redis it was looked for in. A directive the name
// is a likely misspelling of is named instead of the project.
func TestNotFoundSaysWhere(t *testing.T) {
	t.Parallel()
	bin := spooltest.Binary(t)
	project, home := t.TempDir(), t.TempDir()
	run := func(args ...string) (int, string) {
		ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Dir = project
		cmd.Env = []string{"PATH=" + t.TempDir(), "HOME=" + home, "GORACE=atexit_sleep_ms=0"}
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		if ee := (*exec.ExitError)(nil); err != nil {
			require.ErrorAs(t, err, &ee)
			return ee.ExitCode(), errb.String()
		}
		return 0, errb.String()
	}
	code, errs := run("thread", "run", "demo/hello", "--embedded", "--wait")
	require.Equal(t, 1, code)
	require.Equal(t, fmt.Sprintf("spool: directive \"demo/hello\" not found in %s, %s or spool's built-in directives (the project is %s: run in the project that has it, or pass --project DIR)\n",
		filepath.Join(project, ".ai", "directives"), filepath.Join(home, ".ai", "directives"), project), errs)
	// A directive the name is a likely misspelling of is named instead.
	require.NoError(t, os.MkdirAll(filepath.Join(project, ".ai", "directives", "demo"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(project, ".ai", "directives", "demo", "hallo.md"), []byte("# hallo\n"), 0o644))
	code, errs = run("thread", "run", "demo/hello", "--embedded", "--wait")
	require.Equal(t, 1, code)
	require.Equal(t, fmt.Sprintf("spool: directive \"demo/hello\" not found in %s, %s or spool's built-in directives; did you mean demo/hallo?\n",
		filepath.Join(project, ".ai", "directives"), filepath.Join(home, ".ai", "directives")), errs)

	other := testenv.NewRedisOn(t, testenv.Standalone)
	code, errs = run("--redis-url", other.URL, "--namespace", "elsewhere", "thread", "show", "demo/hello-1-aaaaaaaaaa")
	require.Equal(t, 1, code)
	require.Equal(t, "spool: thread \"demo/hello-1-aaaaaaaaaa\" not found in "+other.URL+", namespace elsewhere\n", errs)
}
