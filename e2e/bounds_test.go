package e2e

import (
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

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// oneLine requires a refusal of exit code code whose stderr is one line
// starting "spool: " and holding want.
func oneLine(t *testing.T, res spooltest.Result, code int, want string) {
	t.Helper()
	require.Equal(t, code, res.Code, "stdout %s\nstderr %s", res.Stdout, res.Stderr)
	line := strings.TrimSuffix(res.Stderr, "\n")
	require.NotContains(t, line, "\n", "one line")
	require.True(t, strings.HasPrefix(line, "spool: "), line)
	require.Contains(t, line, want)
	require.Less(t, len(line), 400, "the line does not repeat what it refuses")
}

// apiPost POSTs body (JSON) to base+path and returns the status and
// the problem's code, if any.
func apiPost(t *testing.T, base, path string, body any) (int, string) {
	t.Helper()
	b, err := json.Marshal(body)
	require.NoError(t, err)
	resp, err := http.Post(base+path, "application/json", strings.NewReader(string(b)))
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var p struct{ Code, Detail string }
	_ = json.Unmarshal(raw, &p)
	require.Less(t, len(p.Detail), 400, "the problem does not repeat what it refuses")
	return resp.StatusCode, p.Code
}

// TestQueueNamesChecked: a queue name no worker could serve (a NUL, a
// path, 200 KB, braces) is refused before any thread exists, by `thread
// run`, the API and `worker --queues`, instead of a thread that sits
// created forever.
func TestQueueNamesChecked(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: workerProject()})
	run := []string{"thread", "run", "t/files", "--model", "script:scripts/w.yaml"}
	for _, q := range []string{"../etc", "a/b", "{tag}", "x y", strings.Repeat("q", 100_000), ""} {
		oneLine(t, e.Spool(append(run, "--queue", q)...), 2, "queue")
	}
	oneLine(t, e.Spool("worker", "--queues", "../etc=1"), 2, "queue")
	srv := startAPI(t, e)
	for _, q := range []string{"a\x00b", "../../x", strings.Repeat("q", 200_000)} {
		status, code := apiPost(t, srv.base, "/v1/threads", map[string]any{"directive": "t/files", "model": "script:scripts/w.yaml",
			"inputs": map[string]any{"name": "q"}, "queue": q})
		require.Equal(t, http.StatusUnprocessableEntity, status)
		require.Equal(t, "refused", code)
	}
	recs, err := e.Orch.Threads(context.Background(), registry.Filter{})
	require.NoError(t, err)
	require.Empty(t, recs, "no thread was registered")
	// A good name still runs.
	e.StartWorker("--concurrency", "1", "--queues", "batch.low:1=1")
	rec := runCompleted(t, e, append(run[2:], "--input", "name=q", "--queue", "batch.low:1")...)
	require.Equal(t, "batch.low:1", rec.Queue)
}

// TestInputsBounded: a thread's inputs hold at most 1 MiB as JSON, the
// same for --inputs-json (inline or @FILE, read no further than that),
// --input and the API; just under it starts.
func TestInputsBounded(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: workerProject()})
	run := []string{"thread", "run", "t/files", "--model", "script:scripts/w.yaml"}
	big := strings.Repeat("x", thread.MaxInputsBytes)
	file := filepath.Join(t.TempDir(), "inputs.json")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`{"name": %q}`, big)), 0o644))
	oneLine(t, e.Spool(append(run, "--inputs-json", "@"+file)...), 2, "1 MiB")
	huge := filepath.Join(t.TempDir(), "huge.json")
	require.NoError(t, os.WriteFile(huge, []byte(`{"name": "`+strings.Repeat("y", 64<<20)+`"}`), 0o644))
	oneLine(t, e.Spool(append(run, "--inputs-json", "@"+huge)...), 2, "1 MiB")
	srv := startAPI(t, e)
	status, code := apiPost(t, srv.base, "/v1/threads", map[string]any{"directive": "t/files", "model": "script:scripts/w.yaml",
		"inputs": map[string]any{"name": big}})
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "refused", code)
	recs, err := e.Orch.Threads(context.Background(), registry.Filter{})
	require.NoError(t, err)
	require.Empty(t, recs, "no thread was registered")

	// Just under the limit: the thread is started with them.
	ok := strings.Repeat("z", thread.MaxInputsBytes-100)
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`{"name": %q}`, ok)), 0o644))
	id := startThread(t, e, append(run[2:], "--inputs-json", "@"+file)...)
	rec, err := e.Orch.Record(context.Background(), id)
	require.NoError(t, err)
	require.Equal(t, ok, rec.Inputs["name"])
}

// TestScriptSizeBounded: a scripted-provider script over 1 MiB is
// refused before it is parsed (a 28 MB script once took 2.65 GB to
// check), at `thread run`, with one line.
func TestScriptSizeBounded(t *testing.T) {
	t.Parallel()
	files := workerProject()
	var b strings.Builder
	b.WriteString("directives:\n  \"t/files\":\n")
	for b.Len() <= 2<<20 {
		b.WriteString("    - text: \"turn {{.turn}}\"\n")
	}
	files["scripts/big.yaml"] = b.String()
	e := spooltest.New(t, spooltest.Options{Files: files})
	oneLine(t, e.Spool("thread", "run", "t/files", "--input", "name=q", "--model", "script:scripts/big.yaml"), 2, "1 MiB")
}

// TestStoreStallShown: a thread whose worker waits on the blob store (the
// S3 server stopped) says so in `thread show` (text and JSON) and the
// monitor while it waits, and stops saying so once the store answers
// and the thread goes on.
func TestStoreStallShown(t *testing.T) {
	t.Parallel()
	s3 := testenv.NewPrivateS3(t)
	e := spooltest.New(t, spooltest.Options{S3: s3.S3, Files: tickerProject(30)})
	home := filepath.Dir(e.Project)
	e.StartWorker("--concurrency", "2", "--storage-patience", "3m")
	mon, _ := startMonitor(t, e, nil)
	id := startThread(t, e, "f/ticker", "--model", "script:scripts/ticker.yaml")
	require.Eventually(t, func() bool { return len(ticks(t, home, id)) >= 3 }, time.Minute, 50*time.Millisecond)

	s3.Stop()
	stopped := time.Now()
	var shown *registry.Record
	require.Eventually(t, func() bool {
		res := e.Spool("thread", "show", id, "--json")
		var rec registry.Record
		if res.Code != 0 || json.Unmarshal([]byte(res.Stdout), &rec) != nil {
			return false
		}
		shown = &rec
		return rec.Stalled != nil
	}, time.Minute, 200*time.Millisecond, "thread show says nothing of the stall")
	t.Logf("stalled on %s %s after the store stopped: %s", shown.Stalled.On, time.Since(stopped).Round(100*time.Millisecond), shown.Stalled.Error)
	require.Equal(t, registry.StalledOnStorage, shown.Stalled.On)
	require.Equal(t, thread.StatusRunning, shown.Status)
	require.NotEmpty(t, shown.Stalled.Error)
	text := e.Spool("thread", "show", id)
	require.Equal(t, 0, text.Code, text.Stderr)
	require.Contains(t, text.Stdout, "stalled    on storage for ")
	get := func(path string) string {
		resp, err := http.Get(mon + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return string(b)
	}
	require.Contains(t, get("/"), "stalled on storage", "the monitor's list")
	require.Contains(t, get("/threads/"+url.PathEscape(id)), "stalled on <b>storage</b>", "the monitor's thread page")

	require.NoError(t, s3.Start())
	rec := e.Wait([]string{id}, 3*time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Nil(t, rec.Stalled, "the stall is cleared once the store answers")
	text = e.Spool("thread", "show", id)
	require.NotContains(t, text.Stdout, "stalled")
}
