package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/transcript"
)

// requireOneLineError checks a refused command: exit code, one "spool: "
// line on stderr matching like, nothing on stdout.
func requireOneLineError(t *testing.T, res spooltest.Result, code int, like string) {
	t.Helper()
	require.Equal(t, code, res.Code, "stdout:\n%s\nstderr:\n%s", res.Stdout, res.Stderr)
	require.Empty(t, res.Stdout)
	requireNoTrace(t, res.Stderr)
	lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
	require.Len(t, lines, 1, res.Stderr)
	require.Regexp(t, "^spool: .*"+like, lines[0])
}

// TestScriptModelsStayInProject (issue 13, item 3): a script: model or a
// models.yaml tier that resolves outside the project (absolute, "..", a
// symlink) is refused by `thread run` with exit 2 and one line that quotes
// nothing of the file, and nothing of it reaches the store.
func TestScriptModelsStayInProject(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/s.md": directive("s", `turns="2"`, "", `<success>done</success>`),
		"scripts/ok.yaml":       "directives:\n  \"*\":\n    - text: ok\n",
	}})
	const secret = "TOPSECRET-first-line"
	secretFile := filepath.Join(filepath.Dir(e.Project), "secret.txt")
	require.NoError(t, os.WriteFile(secretFile, []byte(secret+"\n"), 0o644))
	require.NoError(t, os.Symlink(secretFile, filepath.Join(e.Project, "scripts", "link.yaml")))
	require.NoError(t, os.Symlink(filepath.Dir(e.Project), filepath.Join(e.Project, "up")))

	for _, model := range []string{"script:/etc/passwd", "script:" + secretFile, "script:../secret.txt",
		"script:scripts/../../secret.txt", "script:scripts/link.yaml", "script:up/secret.txt"} {
		res := e.SpoolContext(context.Background(), quietEnv(), "thread", "run", "t/s", "--model", model)
		requireOneLineError(t, res, 2, "outside the project")
		require.NotContains(t, res.Stderr, secret)
		require.NotContains(t, res.Stderr, "root:")
	}
	// A child's bundle is its parent's, but its model is checked all the same.
	res := e.SpoolContext(context.Background(), quietEnv(), "thread", "run", "t/s", "--parent", "t/s-1-x", "--model", "script:/etc/passwd")
	requireOneLineError(t, res, 2, "outside the project")

	models := filepath.Join(e.Project, ".ai", "config", "agent", "models.yaml")
	require.NoError(t, os.MkdirAll(filepath.Dir(models), 0o755))
	for _, tier := range []string{"script:../secret.txt", "script:" + secretFile, "script:scripts/link.yaml"} {
		require.NoError(t, os.WriteFile(models, []byte("tiers:\n  fast: "+tier+"\n"), 0o644))
		res := e.SpoolContext(context.Background(), quietEnv(), "thread", "run", "t/s", "--model", "script:scripts/ok.yaml")
		requireOneLineError(t, res, 2, "tier fast: .*outside the project")
		require.NotContains(t, res.Stderr, secret)
	}

	// An inside script still runs (the store is checked below for the rest).
	require.NoError(t, os.WriteFile(models, []byte("tiers:\n  fast: script:scripts/ok.yaml\n"), 0o644))
	res = e.SpoolContext(context.Background(), quietEnv(), "thread", "run", "t/s", "--model", "script:scripts/ok.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)

	ctx := context.Background()
	infos, err := e.Store.List(ctx, "")
	require.NoError(t, err)
	require.NotEmpty(t, infos)
	for _, inf := range infos {
		b, err := e.Store.Get(ctx, inf.Key)
		require.NoError(t, err)
		require.NotContains(t, string(b), secret, inf.Key)
	}
}

// TestTranscriptOfTamperedThread (issue 13, item 12): `thread transcript`
// of a tampered transcript prints the intact prefix, then fails (exit 1)
// with one line naming the damage; --lenient warns on stderr and exits 0.
// A deleted last segment counts as damage too (the registry's mark).
func TestTranscriptOfTamperedThread(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := workerEnv(t, workerProject(), "2")
	edited := finishedThread(t, e, "edited").ThreadID
	cut := finishedThread(t, e, "cut").ThreadID

	seg := blobkey.Segment(edited, 2)
	data, err := e.Store.Get(ctx, seg)
	require.NoError(t, err)
	require.NoError(t, e.Store.Put(ctx, seg, bytes.Replace(data, []byte(`"seq":`), []byte(`"seq": `), 1)))
	require.NoError(t, e.Store.Delete(ctx, blobkey.Segment(cut, 3)))

	for id, bad := range map[string]string{edited: seg, cut: blobkey.Segment(cut, 3)} {
		for _, format := range []string{"text", "jsonl", "markdown"} {
			res := e.SpoolContext(ctx, quietEnv(), "thread", "transcript", id, "--format", format)
			require.Equal(t, 1, res.Code, "%s %s: stdout:\n%s\nstderr:\n%s", id, format, res.Stdout, res.Stderr)
			lines := strings.Split(strings.TrimSpace(res.Stderr), "\n")
			require.Len(t, lines, 1, res.Stderr)
			require.Contains(t, lines[0], "failed verification")
			require.Contains(t, lines[0], bad)
			require.NotEmpty(t, res.Stdout, "%s: the intact prefix is printed", format)
		}
		res := e.SpoolContext(ctx, quietEnv(), "thread", "transcript", id, "--lenient")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Contains(t, res.Stderr, "spool: warning: ")
		require.Contains(t, res.Stderr, bad)
		require.Contains(t, res.Stdout, "thread_started")
	}
	res := e.SpoolContext(ctx, quietEnv(), "thread", "transcript", finishedThread(t, e, "intact").ThreadID)
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Empty(t, res.Stderr)
}

// TestReadersNeedNoPrivateKey (issue 13, item 4): every read-only command
// and the monitor run with the public key only, or with no key at all, and
// then say "unverified" where they would have verified.
func TestReadersNeedNoPrivateKey(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, workerProject(), "2")
	id := finishedThread(t, e, "reader").ThreadID

	pubs, err := filepath.Glob(filepath.Join(e.KeyDir, "*.pub"))
	require.NoError(t, err)
	require.Len(t, pubs, 1)
	pubDir, emptyDir := t.TempDir(), t.TempDir()
	pub, err := os.ReadFile(pubs[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(pubDir, filepath.Base(pubs[0])), pub, 0o644))
	// keys init exports the public half of the existing key for readers.
	exported := filepath.Join(t.TempDir(), "public")
	res := e.SpoolContext(context.Background(), quietEnv(), "keys", "init", "--dir", e.KeyDir, "--public-dir", exported, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Contains(t, res.Stdout, `"created": false`)
	require.FileExists(t, filepath.Join(exported, filepath.Base(pubs[0])))
	require.NoFileExists(t, filepath.Join(exported, "signing.key"))
	setups := map[string][]string{
		// SPOOL_SIGNING_KEY names a file that is not there; the .pub beside it is.
		"public key beside": {"SPOOL_SIGNING_KEY=" + filepath.Join(pubDir, "signing.key")},
		"trusted keys":      {"SPOOL_SIGNING_KEY=" + filepath.Join(emptyDir, "signing.key"), "SPOOL_TRUSTED_KEYS=" + exported},
		"no key":            {"SPOOL_SIGNING_KEY=" + filepath.Join(emptyDir, "signing.key")},
	}
	for name, env := range setups {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			none := name == "no key"
			env := append(quietEnv(), env...)
			for _, args := range [][]string{
				{"thread", "list", "--json"}, {"thread", "show", id}, {"thread", "tree", id}, {"thread", "chain", id},
				{"thread", "wait", id}, {"budget", "show", id}, {"thread", "transcript", id},
				{"thread", "search", id, "--query", "hello"},
			} {
				res := e.SpoolContext(context.Background(), env, args...)
				require.Equal(t, 0, res.Code, "%v: stdout:\n%s\nstderr:\n%s", args, res.Stdout, res.Stderr)
				require.NotEmpty(t, res.Stdout, args)
				if args[1] == "transcript" || args[1] == "search" {
					require.Equal(t, none, strings.Contains(res.Stderr, "unverified"), "%v: %s", args, res.Stderr)
				}
			}
			res := e.SpoolContext(context.Background(), env, "thread", "verify", id)
			if none {
				requireOneLineError(t, res, 1, "hash chain intact.*signatures unverified")
			} else {
				require.Equal(t, 0, res.Code, res.Stderr)
				require.Contains(t, res.Stdout, "verified 3 segments")
			}
			require.NoFileExists(t, filepath.Join(emptyDir, "signing.key"), "a reader makes no key")
			require.NoFileExists(t, filepath.Join(pubDir, "signing.key"), "a reader makes no key")

			p, err := testenv.FreePort()
			require.NoError(t, err)
			addr := fmt.Sprintf("127.0.0.1:%d", p)
			mon := e.Start(env, "monitor", "--addr", addr)
			require.Eventually(t, func() bool { return strings.Contains(mon.Log(), "spool monitor: http://") || mon.Exited() }, time.Minute, 50*time.Millisecond)
			require.False(t, mon.Exited(), "the monitor exited:\n%s", mon.Log())
			var events struct {
				Events     []json.RawMessage `json:"events"`
				Warning    string            `json:"warning"`
				Unverified bool              `json:"unverified"`
			}
			body := httpGet(t, "http://"+addr+"/api/threads/"+url.PathEscape(id)+"/events")
			require.NoError(t, json.Unmarshal([]byte(body), &events), body)
			require.NotEmpty(t, events.Events)
			require.Empty(t, events.Warning)
			require.Equal(t, none, events.Unverified)
			page := httpGet(t, "http://"+addr+"/threads/"+url.PathEscape(id)+"/transcript")
			require.Equal(t, none, strings.Contains(page, "Unverified"), page)
			require.NoError(t, mon.Stop(30*time.Second))
		})
	}
}

func httpGet(t *testing.T, u string) string {
	t.Helper()
	resp, err := http.Get(u)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", u, b)
	return string(b)
}

// TestUnservedQueue (issue 13, item 12): a thread enqueued to a queue no
// running worker serves would sit in created with no hint; `thread run
// --queue` warns, and `thread show` says why it waits. A served queue gets
// neither.
func TestUnservedQueue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := spooltest.New(t, spooltest.Options{Files: workerProject()})
	w := e.StartWorker("--concurrency", "1", "--queues", "default=1")
	require.Eventually(t, func() bool { return strings.Contains(w.Log(), "spool worker: serving") }, time.Minute, 50*time.Millisecond)

	type runOut struct {
		ThreadID string `json:"thread_id"`
		Status   string `json:"status"`
	}
	rec, res := spoolEnvJSON[runOut](t, e, quietEnv(), "thread", "run", "t/files", "--input", "name=q", "--model", "script:scripts/w.yaml", "--queue", "nowhere", "--json")
	require.Contains(t, res.Stderr, `spool: warning: thread `+rec.ThreadID+` is queued, but no running worker serves queue "nowhere" (1 running serve [default])`)

	show := e.SpoolContext(ctx, quietEnv(), "thread", "show", rec.ThreadID)
	require.Equal(t, 0, show.Code, show.Stderr)
	require.Contains(t, show.Stdout, "status     created")
	require.Contains(t, show.Stdout, `queue      no running worker serves queue "nowhere"`)
	show = e.SpoolContext(ctx, quietEnv(), "thread", "show", rec.ThreadID, "--json")
	require.Equal(t, 0, show.Code, show.Stderr)
	require.Contains(t, show.Stderr, `spool: warning: thread `+rec.ThreadID+` waits: no running worker serves queue "nowhere"`)

	// The same thread's queue gets a worker: it runs, and nothing is said.
	w2 := e.StartWorker("--concurrency", "1", "--queues", "nowhere=1")
	done := e.Wait([]string{rec.ThreadID}, 2*time.Minute)
	require.Equal(t, "completed", string(done[rec.ThreadID].Status), w2.Log())
	res = e.SpoolContext(ctx, quietEnv(), "thread", "run", "t/files", "--input", "name=q2", "--model", "script:scripts/w.yaml", "--queue", "default", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.NotContains(t, res.Stderr, "warning")
}

// spawnTool records its environment, then starts a child with the CLI and
// waits for it, as a project tool would.
const spawnTool = `#!/bin/sh
env > "$HOME/tool-env"
cat "/proc/$PPID/environ" > "$HOME/worker-env" 2>&1
spool thread run t/kid --input n=7 --model script:scripts/spawn.yaml --wait --json > "$HOME/kid.json" 2> "$HOME/kid.err"
echo "{\"output\": \"spool exited $?\"}"
`

// TestToolStartsChildWithoutSecrets (issue 13, item 6): an external tool
// gets none of the worker's credentials (Redis URL, S3 secret, signing
// key, tokens) yet still starts a child of its thread with `spool thread
// run` and waits for it, through its call's socket (package spawn).
func TestToolStartsChildWithoutSecrets(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/spawner.md": directive("spawner", `turns="3"`, `<execute><tool>acme/spawn</tool></execute>`, `<success>done</success>`),
		".ai/directives/t/kid.md":     directiveWithInputs("kid", `turns="2"`, "", `<input name="n" type="string" required="true">n</input>`),
		".ai/tools/acme/spawn.sh":     spawnTool,
		"scripts/spawn.yaml":          script("spawn"),
	}})
	home := filepath.Dir(e.Project)
	const token = "monitor-token-must-not-leak"
	e.Start([]string{"PATH=" + filepath.Dir(e.Bin) + ":" + os.Getenv("PATH"), "SPOOL_MONITOR_TOKEN=" + token,
		"SPOOL_MONITOR_BASIC_AUTH=admin:basic-must-not-leak"}, "worker", "--concurrency", "2")

	rec, res := runJSON(t, e, "t/spawner", "--model", "script:scripts/spawn.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, "completed", string(rec.Status))
	kidErr, _ := os.ReadFile(filepath.Join(home, "kid.err"))
	require.Contains(t, rec.Result, "spool exited 0", "stderr of spool in the tool: %s", kidErr)

	kidOut, err := os.ReadFile(filepath.Join(home, "kid.json"))
	require.NoError(t, err)
	var kid struct {
		ThreadID string `json:"thread_id"`
		ParentID string `json:"parent_id"`
		Status   string `json:"status"`
		Result   string `json:"result"`
	}
	require.NoError(t, json.Unmarshal(kidOut, &kid), "stdout %s, stderr %s", kidOut, kidErr)
	require.Equal(t, rec.ThreadID, kid.ParentID, "the tool's thread is the child's parent")
	require.Equal(t, "completed", kid.Status)
	require.Equal(t, "kid 7 done", kid.Result)

	env, err := os.ReadFile(filepath.Join(home, "tool-env"))
	require.NoError(t, err)
	for _, name := range []string{"SPOOL_REDIS_URL", "SPOOL_SIGNING_KEY", "SPOOL_S3_ENDPOINT", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "SPOOL_MONITOR_TOKEN"} {
		require.NotContains(t, string(env), "\n"+name+"=", "%s reaches the tool", name)
	}
	secrets := []string{e.Redis.URL, token, "basic-must-not-leak", filepath.Join(e.KeyDir, transcript.SigningKeyFile)}
	if e.S3 != nil {
		secrets = append(secrets, e.S3.SecretKey)
	}
	for _, s := range secrets {
		require.NotContains(t, string(env), s, "a worker credential reaches the tool")
	}
	require.Contains(t, string(env), "SPOOL_SPAWN_SOCKET=")
	// Nor through its parent's /proc entry: the worker is not dumpable
	// (root reads it all the same: tools.TestWorkerIsNotDumpable checks
	// the flag itself).
	if _, err := os.Stat("/proc/self/environ"); err == nil && os.Geteuid() != 0 {
		parent, err := os.ReadFile(filepath.Join(home, "worker-env"))
		require.NoError(t, err)
		require.NotContains(t, string(parent), token, "the tool read the worker's environment from /proc")
		require.NotContains(t, string(parent), "SPOOL_REDIS_URL=", "the tool read the worker's environment from /proc")
	}
}
