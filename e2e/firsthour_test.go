package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// What trips a new user in the first hour (issue 14), end to end.

// TestProviderKeys: a worker without the model's API key fails the thread
// at once, saying which key on which worker, and never calls the model;
// `thread run` warns when the key is not set where it runs (the workers
// hold the keys). A key the provider refuses (401, 403) fails the thread
// after one call, never retried, and the error line says it once.
func TestProviderKeys(t *testing.T) {
	t.Parallel()
	var anthropicCalls, openaiCalls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("content-type", "application/json")
		switch r.URL.Path {
		case "/v1/messages":
			anthropicCalls.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key"}}`))
		case "/v1/chat/completions":
			openaiCalls.Add(1)
			w.WriteHeader(http.StatusForbidden)
			// A server that calls it a server_error: still no retry.
			_, _ = w.Write([]byte(`{"error":{"message":"Project does not have access to this model","type":"server_error","param":null,"code":null}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/chat.md": directive("chat", `turns="3"`, fsPerms, `<success>done</success>`),
	}})
	warning := func(model, key string) string {
		return "spool: warning: model " + model + " needs " + key + ", which is not set here; workers hold the provider keys, not the CLI"
	}

	// A worker without keys (spooltest keeps the test's own out of it).
	keyless := e.Start(quietEnv(), "worker", "--concurrency", "2")
	for _, tc := range []struct{ model, key string }{{"claude-sonnet-4-5", "ANTHROPIC_API_KEY"}, {"gpt-4o", "OPENAI_API_KEY"}} {
		began := time.Now()
		rec, res := runJSONEnv(t, e, quietEnv(), "t/chat", "--model", tc.model)
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, thread.StatusError, rec.Status)
		require.NotNil(t, rec.Error)
		require.Equal(t, "provider_auth", rec.Error.Code)
		require.Regexp(t, `^`+tc.key+` is not set on worker \S+ \(workers hold the provider keys, not the CLI: set it in the worker's environment\)$`, rec.Error.Message)
		require.Less(t, time.Since(began), 20*time.Second, "failed at once, not retried as transient")
		require.EqualValues(t, 1, rec.Activation, "one activation: nothing retried")
		require.Zero(t, rec.Cost.Turns)
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		require.Len(t, lines, 2, res.Stderr)
		require.True(t, strings.HasPrefix(lines[0], warning(tc.model, tc.key)), lines[0])
		require.Regexp(t, `^spool: thread t/chat-\S+ ended error: provider_auth: `+tc.key+` is not set on worker \S+ \(workers hold`, lines[1])
		requireReadsOnce(t, lines[1])
	}
	// With the key where the CLI runs, no warning.
	res := e.SpoolContext(t.Context(), append(quietEnv(), "ANTHROPIC_API_KEY=sk-here"), "thread", "run", "t/chat", "--model", "claude-sonnet-4-5")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Empty(t, res.Stderr)
	id := strings.TrimSpace(res.Stdout)
	require.Equal(t, "provider_auth", e.Wait([]string{id}, time.Minute)[id].Error.Code, "the keyless worker fails it")
	require.NoError(t, keyless.Stop(30*time.Second))
	require.Zero(t, anthropicCalls.Load()+openaiCalls.Load(), "a worker without the key never calls the model")

	// A worker whose keys the provider refuses.
	e.Start([]string{"ANTHROPIC_API_KEY=sk-wrong", "ANTHROPIC_BASE_URL=" + srv.URL, "OPENAI_API_KEY=sk-wrong", "OPENAI_BASE_URL=" + srv.URL + "/v1"},
		"worker", "--concurrency", "2")
	for _, tc := range []struct {
		model, line string
		calls       *atomic.Int32
	}{
		{"claude-sonnet-4-5", `provider_permanent: HTTP 401: invalid x-api-key \(check ANTHROPIC_API_KEY on the worker\)`, &anthropicCalls},
		{"gpt-4o", `provider_permanent: HTTP 403: Project does not have access to this model \(check OPENAI_API_KEY on the worker\)`, &openaiCalls},
	} {
		rec, res := runJSONEnv(t, e, quietEnv(), "t/chat", "--model", tc.model)
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, thread.StatusError, rec.Status)
		require.Regexp(t, `^`+tc.line+`$`, rec.Error.Code+": "+rec.Error.Message, "the record reads once too")
		require.EqualValues(t, 1, tc.calls.Load(), "a refused key is permanent: one call, no retry")
		lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
		last := lines[len(lines)-1]
		require.Regexp(t, `^spool: thread t/chat-\S+ ended error: `+tc.line+`$`, last)
		requireReadsOnce(t, last)
	}
}

// TestErrorLinesReadOnce: a thread stopped by a limit ends with an error
// line (and record) that names its code once.
func TestErrorLinesReadOnce(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: cliProject()})
	for _, tc := range []struct{ limit, code string }{{"spend=0.0001", "spend_exceeded"}, {"turns=1", "turns_exceeded"}} {
		rec, res := runJSONEnv(t, e, quietEnv(), "t/cli", "--input", "name=x", "--model", "script:scripts/cli.yaml", "--limit", tc.limit, "--embedded")
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, thread.StatusError, rec.Status)
		require.Equal(t, tc.code, rec.Error.Code)
		require.False(t, strings.HasPrefix(rec.Error.Message, tc.code), "the record's message does not repeat its code: %q", rec.Error.Message)
		line := strings.TrimSuffix(res.Stderr, "\n")
		require.Regexp(t, `^spool: thread t/cli-\S+ ended error: `+tc.code+`: \S`, line)
		requireReadsOnce(t, line)
	}
}

func slowProject() map[string]string {
	return map[string]string{
		".ai/directives/t/slow.md":  directive("slow", `turns="6" spend="0.5"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/quick.md": directive("quick", `turns="2" spend="0.5"`, fsPerms, `<success>done</success>`),
		"scripts/slow.yaml":         script("slow"),
	}
}

// interrupt sends Ctrl-C's SIGINT to p and returns its exit code.
func interrupt(t *testing.T, p *spooltest.Proc) int {
	t.Helper()
	require.NoError(t, p.Cmd.Process.Signal(os.Interrupt))
	require.Eventually(t, p.Exited, 60*time.Second, 20*time.Millisecond, "still running after SIGINT:\n%s", p.Log())
	return p.Cmd.ProcessState.ExitCode()
}

var interruptedID = regexp.MustCompile(`interrupted: thread (t/slow-\S+) `)

// TestInterruptedWait: Ctrl-C during `thread run --wait` says that the
// thread goes on and how to follow it, and that is true: on a shared
// Redis the workers finish it; an --embedded run's thread resumes when
// `spool dev` starts on its data directory. An --embedded run beside a
// running `spool dev` uses the dev's Redis; beside another --embedded run
// it refuses to start a second redis-server on the same data directory.
func TestInterruptedWait(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: slowProject()})
	slow := []string{"thread", "run", "t/slow", "--model", "script:scripts/slow.yaml", "--wait"}

	t.Run("on workers", func(t *testing.T) {
		p := e.Start(quietEnv(), slow...) // no worker yet: it waits
		var id string
		require.Eventually(t, func() bool {
			recs, err := e.Orch.Threads(t.Context(), registry.Filter{Directive: "t/slow"})
			if err == nil && len(recs) == 1 {
				id = recs[0].ThreadID
			}
			return id != ""
		}, 60*time.Second, 50*time.Millisecond, p.Log())
		require.Equal(t, 1, interrupt(t, p))
		require.Equal(t, "spool: interrupted: thread "+id+" keeps running; follow it with `spool thread wait "+id+"`\n", p.Log())
		e.StartWorker("--concurrency", "1")
		res := e.SpoolContext(t.Context(), quietEnv(), "thread", "wait", id, "--json")
		require.Equal(t, 0, res.Code, res.Stderr)
	})

	t.Run("embedded, then spool dev", func(t *testing.T) {
		if _, err := exec.LookPath("redis-server"); err != nil {
			if testenv.RequireReal() {
				t.Fatal("no redis-server on PATH")
			}
			t.Skip("no redis-server on PATH: the embedded Redis keeps nothing")
		}
		dataDir := t.TempDir()
		env := append(quietEnv(), "SPOOL_REDIS_URL=", "SPOOL_DATA_DIR="+dataDir)
		p := e.Start(env, append(slow, "--embedded", "--follow")...)
		require.Eventually(t, func() bool { return strings.Contains(p.Log(), " turn 1/6 ") || p.Exited() }, 60*time.Second, 20*time.Millisecond)
		require.False(t, p.Exited(), p.Log())

		// A second --embedded run on the same data dir starts no second
		// redis-server there.
		res := e.SpoolContext(t.Context(), env, "thread", "run", "t/quick", "--model", "script:scripts/slow.yaml", "--embedded", "--wait")
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, "spool: embedded redis: "+filepath.Join(dataDir, "redis")+
			fmt.Sprintf(" is in use by another spool process, pid %d (spool dev, or a thread run --embedded); let it finish or stop it first\n", p.Cmd.Process.Pid), res.Stderr)

		require.Equal(t, 1, interrupt(t, p))
		m := interruptedID.FindStringSubmatch(p.Log())
		require.NotNil(t, m, p.Log())
		id := m[1]
		require.Contains(t, p.Log(), "spool: interrupted: thread "+id+" is saved in "+dataDir+
			" and resumes when `spool dev` starts on that data directory; then follow it with `spool thread wait "+id+"`\n")

		port, err := testenv.FreePort()
		require.NoError(t, err)
		dev := e.Start(env, "dev", "--addr", fmt.Sprintf("127.0.0.1:%d", port), "--concurrency", "2")
		require.Eventually(t, func() bool { return strings.Contains(dev.Log(), "spool dev is running") || dev.Exited() }, 60*time.Second, 20*time.Millisecond)
		require.False(t, dev.Exited(), dev.Log())

		// The interrupted thread resumes on the dev and finishes, each turn once.
		waited, _ := spoolEnvJSON[map[string]*registry.Record](t, e, env, "thread", "wait", id, "--timeout", "2m", "--json")
		require.Equal(t, thread.StatusCompleted, waited[id].Status)
		require.Equal(t, 5, waited[id].Cost.Turns)

		// --embedded beside the dev runs on the dev's Redis.
		quick, res := spoolEnvJSON[registry.Record](t, e, env, "thread", "run", "t/quick", "--model", "script:scripts/slow.yaml", "--embedded", "--wait", "--json")
		require.Contains(t, res.Stderr, "spool: spool dev is running on "+dataDir+": --embedded uses its Redis (redis://127.0.0.1:")
		show := e.SpoolContext(t.Context(), env, "thread", "show", quick.ThreadID, "--json")
		require.Equal(t, 0, show.Code, "the dev's Redis holds the --embedded run's thread: %s", show.Stderr)

		// Ctrl-C of an --embedded run on the dev: the dev keeps running it.
		p = e.Start(env, append(slow, "--embedded", "--follow")...)
		require.Eventually(t, func() bool { return strings.Contains(p.Log(), "] running ") || p.Exited() }, 60*time.Second, 20*time.Millisecond)
		require.Equal(t, 1, interrupt(t, p))
		m = interruptedID.FindStringSubmatch(p.Log())
		require.NotNil(t, m, p.Log())
		require.Contains(t, p.Log(), "spool: interrupted: thread "+m[1]+" keeps running; follow it with `spool thread wait "+m[1]+"`\n")
		res = e.SpoolContext(t.Context(), env, "thread", "wait", m[1], "--timeout", "2m")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.NoError(t, dev.Stop(30*time.Second), dev.Log())
	})

	t.Run("embedded without redis-server", func(t *testing.T) {
		env := append(quietEnv(), "SPOOL_REDIS_URL=", "SPOOL_DATA_DIR="+t.TempDir(), "PATH="+t.TempDir())
		p := e.Start(env, append(slow, "--embedded", "--follow")...)
		require.Eventually(t, func() bool { return strings.Contains(p.Log(), "] running ") || p.Exited() }, 60*time.Second, 20*time.Millisecond)
		require.Equal(t, 1, interrupt(t, p))
		require.Regexp(t, `(?m)^spool: interrupted: thread t/slow-\S+ is lost: with no redis-server on PATH, the embedded Redis kept nothing$`, p.Log())
	})
}

// TestTurnsReconstructedAgree: the number of turns a resume reconstructs
// is the same in the CLI's answer, the continuation's transcript and the
// monitor's view of it.
func TestTurnsReconstructedAgree(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: cliProject()})
	rec, res := runJSON(t, e, "t/cli", "--input", "name=ada", "--model", "script:scripts/cli.yaml", "--embedded")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, 3, rec.Cost.Turns)

	type resumeOut struct {
		NewThreadID        string `json:"new_thread_id"`
		ReconstructedTurns int    `json:"reconstructed_turns"`
	}
	resumed := spoolJSON[resumeOut](t, e, "thread", "resume", rec.ThreadID, "--message", "one more", "--json")
	require.Equal(t, 3, resumed.ReconstructedTurns, "the three model turns of the thread")

	e.StartWorker("--concurrency", "1")
	require.Equal(t, thread.StatusCompleted, e.Wait([]string{resumed.NewThreadID}, 2*time.Minute)[resumed.NewThreadID].Status)
	continued := eventsOf(transcriptEvents(t, e, resumed.NewThreadID), "thread_continued")
	require.Len(t, continued, 1)
	require.EqualValues(t, resumed.ReconstructedTurns, payload(continued[0])["reconstructed_turns"])

	port, err := testenv.FreePort()
	require.NoError(t, err)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	mon := e.Start(nil, "monitor", "--addr", addr)
	require.Eventually(t, func() bool { return strings.Contains(mon.Log(), "spool monitor: http://") || mon.Exited() }, 60*time.Second, 20*time.Millisecond)
	resp, err := http.Get("http://" + addr + "/threads/" + resumed.NewThreadID + "/transcript")
	require.NoError(t, err)
	defer resp.Body.Close()
	body := new(strings.Builder)
	_, err = io.Copy(body, resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body.String(), "continues (3 turns reconstructed)")
}

// TestVersionNamesTheCommit: a binary built from a git checkout says the
// commit it was built from, in `spool version` and `spool --version`.
func TestVersionNamesTheCommit(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout (%v): nothing to stamp", err)
	}
	bin := filepath.Join(t.TempDir(), "spool")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/spool")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, string(out))

	v, err := exec.Command(bin, "version", "--json").Output()
	require.NoError(t, err)
	var got struct {
		Version, Commit, Go string
		Modified            bool
	}
	require.NoError(t, json.Unmarshal(v, &got), string(v))
	require.Equal(t, strings.TrimSpace(string(head)), got.Commit)
	require.NotEmpty(t, got.Version)
	require.True(t, strings.HasPrefix(got.Go, "go1."), got.Go)

	line, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	require.Contains(t, string(line), "commit "+got.Commit)
	flag, err := exec.Command(bin, "--version").Output()
	require.NoError(t, err)
	require.Equal(t, string(line), string(flag))
}
