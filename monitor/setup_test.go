package monitor_test

import (
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/monitor"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
	"github.com/spool-run/spool/worker"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

// env is one test's spool: the test Redis under a random namespace, a
// local blob store, an in-process orchestrator and worker, and the monitor
// on an httptest server.
type env struct {
	t     *testing.T
	orch  *orchestrator.Orchestrator
	store blobstore.Store
	// rdb is the orchestrator's Redis, keys its namespace's, keyring
	// and enq what it was made with.
	rdb     redis.UniversalClient
	keys    keyspace.Space
	keyring *transcript.Keyring
	enq     *queue.Enqueuer
	bundle  string
	srv     *httptest.Server
	gate    string // the file the tree's leaves wait for
}

type envOptions struct {
	auth monitor.Auth
	// latency of each scripted model call (the browser test slows the tree
	// down so that it looks alive).
	latency time.Duration
	// files are added to (a copy of) the test project: approvals.yaml.
	files map[string]string
	// streamDelay is the pause between the streamed pieces of a scripted
	// text (t/writer's).
	streamDelay time.Duration
}

const treeScript = "scripts/tree.yaml"

func setup(t *testing.T, o envOptions) *env {
	t.Helper()
	r := testenv.NewRedis(t)
	ctx := t.Context()
	store, err := blobstore.NewLocal(t.TempDir())
	require.NoError(t, err)
	keyDir := t.TempDir()
	signer, _, err := transcript.InitKeys(keyDir, false)
	require.NoError(t, err)
	keyring, err := transcript.LoadKeyring(keyDir, signer)
	require.NoError(t, err)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() && os.Getenv("SPOOL_TEST_LOG") != "" {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	client := asynq.NewClientFromRedisClient(r.Client)
	enq := &queue.Enqueuer{Client: client}
	orch, err := orchestrator.New(orchestrator.Config{Namespace: r.Namespace, LeaseTTL: 2 * time.Second, Logger: log},
		r.Client, store, enq, signer, keyring)
	require.NoError(t, err)

	project, err := filepath.Abs("testdata/project")
	require.NoError(t, err)
	script, err := os.ReadFile(filepath.Join(project, treeScript))
	require.NoError(t, err)
	if o.latency > 0 {
		script = []byte(strings.Replace(string(script), "latency: 0ms", "latency: "+o.latency.String(), 1))
	}
	if o.streamDelay > 0 {
		script = []byte(strings.Replace(string(script), "latency: ", "stream_delay: "+o.streamDelay.String()+"\nlatency: ", 1))
	}
	if len(o.files) > 0 {
		project = copyProject(t, project, o.files)
	}
	bundle, err := directive.BuildBundle(ctx, store, project, "", map[string][]byte{treeScript: script})
	require.NoError(t, err)

	w, err := worker.New(worker.Config{Concurrency: 6, Queues: map[string]int{queue.DefaultQueue: 1}, Logger: log,
		ShutdownTimeout: 5 * time.Second, RecoverInterval: time.Second}, orch)
	require.NoError(t, err)
	require.NoError(t, w.Start())

	h, err := monitor.New(monitor.Config{Orch: orch, Redis: r.Client, Auth: o.auth, CountsTTL: -1, PollInterval: 200 * time.Millisecond, Logger: log, Project: project})
	require.NoError(t, err)
	srv := httptest.NewServer(h)

	e := &env{t: t, orch: orch, store: store, rdb: r.Client, keys: keyspace.New(r.Namespace), keyring: keyring, enq: enq,
		bundle: bundle, srv: srv, gate: filepath.Join(t.TempDir(), "gate")}
	t.Cleanup(func() {
		e.release() // leaves stop waiting, so the worker stops at once
		srv.Close()
		w.Stop()
		_ = client.Close()
	})
	return e
}

// withMonitor returns e seen through a second monitor, made with cfg, on an
// httptest server closed at the test's end.
func (e *env) withMonitor(cfg monitor.Config) *env {
	e.t.Helper()
	if cfg.Redis == nil {
		cfg.Redis = e.rdb
	}
	h, err := monitor.New(cfg)
	require.NoError(e.t, err)
	srv := httptest.NewServer(h)
	e.t.Cleanup(srv.Close)
	other := *e
	other.srv = srv
	return &other
}

// copyProject copies the project at dir to a temporary directory, modes
// kept, with files added (relative path → content), and returns the copy.
func copyProject(t *testing.T, dir string, files map[string]string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), data, info.Mode().Perm())
	})
	require.NoError(t, err)
	testenv.WriteFiles(t, dst, files)
	return dst
}

// start starts a root thread of directive with inputs on the tree script.
func (e *env) start(directive string, inputs map[string]any) *registry.Record {
	e.t.Helper()
	rec, err := e.orch.Start(e.t.Context(), orchestrator.StartRequest{Directive: directive, Inputs: inputs,
		Model: "script:" + treeScript, Bundle: e.bundle})
	require.NoError(e.t, err)
	return rec
}

// startTagged starts directive with tags, as start starts it.
func (e *env) startTagged(directive string, tags map[string]string) *registry.Record {
	e.t.Helper()
	rec, err := e.orch.Start(e.t.Context(), orchestrator.StartRequest{Directive: directive, Inputs: map[string]any{"text": "x"},
		Model: "script:" + treeScript, Bundle: e.bundle, Tags: tags})
	require.NoError(e.t, err)
	return rec
}

// startTree starts t/root; its leaves wait for e.gate.
func (e *env) startTree() *registry.Record {
	return e.start("t/root", map[string]any{"gate": e.gate})
}

// release lets the tree's leaves past their gate.
func (e *env) release() {
	if _, err := os.Stat(e.gate); err == nil {
		return
	}
	require.NoError(e.t, os.WriteFile(e.gate, []byte("go"), 0o644))
}

// wait waits for threads to finish (following chains).
func (e *env) wait(ids ...string) map[string]*registry.Record {
	e.t.Helper()
	recs, err := e.orch.Wait(e.t.Context(), ids, 2*time.Minute)
	require.NoError(e.t, err)
	return recs
}

// tree is a started tree: its root, branches and leaves.
type tree struct {
	root     *registry.Record
	branches []*registry.Record
	leaves   []*registry.Record
}

// waitTreeHeld waits until both leaves of root's tree are running, on
// their way to the gate (their first turn is in their transcripts; the
// gate's turn commits only once released), with the root and branches
// waiting on them. Nothing changes then until e.release.
func (e *env) waitTreeHeld(root string) tree {
	e.t.Helper()
	ctx := e.t.Context()
	var tr tree
	ok := waitFor(ctx, time.Minute, func() bool {
		var err error
		if tr.root, err = e.orch.Record(ctx, root); err != nil || tr.root.Status != thread.StatusWaiting {
			return false
		}
		if tr.branches, err = e.orch.Children(ctx, root); err != nil || len(tr.branches) != 2 {
			return false
		}
		tr.leaves = nil
		for _, b := range tr.branches {
			if b.Status != thread.StatusWaiting {
				return false
			}
			kids, err := e.orch.Children(ctx, b.ThreadID)
			if err != nil || len(kids) != 1 || kids[0].Status != thread.StatusRunning {
				return false
			}
			tr.leaves = append(tr.leaves, kids[0])
		}
		for _, l := range tr.leaves {
			t, err := transcript.Read(ctx, e.store, l.ThreadID, e.keyring, transcript.Strict)
			if err != nil || !strings.Contains(transcript.RenderText(t.Events), "tool rye/file-system/fs_write result") {
				return false
			}
		}
		return true
	})
	require.True(e.t, ok, "the tree of %s did not reach its gate", root)
	return tr
}

// waitFor polls cond every 50ms until it holds or d passes.
func waitFor(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get fetches path from the monitor with optional request tweaks.
func (e *env) get(path string, tweak ...func(*http.Request)) (int, string, http.Header) {
	e.t.Helper()
	req, err := http.NewRequestWithContext(e.t.Context(), http.MethodGet, e.srv.URL+path, nil)
	require.NoError(e.t, err)
	for _, f := range tweak {
		f(req)
	}
	resp, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(e.t, err)
	return resp.StatusCode, string(b), resp.Header
}

// requireStatus fetches path and requires the status want.
func (e *env) requireStatus(want int, path string, tweak ...func(*http.Request)) {
	e.t.Helper()
	code, body, _ := e.get(path, tweak...)
	require.Equal(e.t, want, code, "%s: %s", path, body)
}

// page fetches path and requires 200.
func (e *env) page(path string) string {
	e.t.Helper()
	code, body, _ := e.get(path)
	require.Equal(e.t, http.StatusOK, code, "GET %s: %s", path, body)
	return body
}
