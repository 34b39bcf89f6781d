package scheduler_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/stack"
	"github.com/spool-run/spool/transcript"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

// tickDirective needs an input, so that Check has something to validate.
const tickDirective = "# Tick\n\n```xml\n<directive name=\"tick\" version=\"1.0.0\">\n  <metadata>\n" +
	"    <description>scheduled test</description>\n    <model id=\"script:scripts/s.yaml\" />\n" +
	"    <limits turns=\"3\" spend=\"0.1\" />\n    <permissions></permissions>\n  </metadata>\n  <inputs>\n" +
	"    <input name=\"who\" type=\"string\" required=\"true\">who</input>\n  </inputs>\n</directive>\n```\n"

const tickScript = "context_window: 200000\nprice: {input_per_mtok: 1.00, output_per_mtok: 5.00}\n" +
	"directives:\n  \"*\":\n    - text: \"tick for {{.inputs.who}}\"\n"

var projectFiles = map[string]string{
	".ai/directives/sched/tick.md": tickDirective,
	"scripts/s.yaml":               tickScript,
}

// env is one test's services: a Redis namespace, a blob store, a project
// and an asynq queue of its own (deleted at cleanup, so no other test's
// worker sees its tasks).
type env struct {
	t       *testing.T
	redis   *testenv.Redis
	store   blobstore.Store
	project string
	queue   string
	signer  *transcript.Signer
	keyring *transcript.Keyring
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{t: t, redis: testenv.NewRedis(t), store: blobstore.NewMemory(), project: t.TempDir(),
		queue: "sched-test-" + testenv.RandomID(4)}
	testenv.WriteFiles(t, e.project, projectFiles)
	keyDir := t.TempDir()
	var err error
	e.signer, _, err = transcript.InitKeys(keyDir, false)
	require.NoError(t, err)
	e.keyring, err = transcript.LoadKeyring(keyDir, e.signer)
	require.NoError(t, err)
	t.Cleanup(func() {
		insp := asynq.NewInspectorFromRedisClient(e.redis.Client)
		_ = insp.DeleteQueue(e.asynqQueue(), true)
	})
	return e
}

// asynqQueue is the asynq name of the test's queue (keyspace.Space.Queue).
func (e *env) asynqQueue() string { return keyspace.New(e.redis.Namespace).Queue(e.queue) }

// orch is one "process": its own Redis client and orchestrator on the
// test's namespace. now may be nil.
func (e *env) orch(now func() time.Time) *orchestrator.Orchestrator {
	e.t.Helper()
	rdb, err := stack.OpenRedis(e.redis.URL)
	require.NoError(e.t, err)
	client := asynq.NewClientFromRedisClient(rdb)
	e.t.Cleanup(func() { _ = rdb.Close() })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	o, err := orchestrator.New(orchestrator.Config{Namespace: e.redis.Namespace, Now: now, Logger: log}, rdb, e.store,
		&queue.Enqueuer{Client: client}, e.signer, e.keyring)
	require.NoError(e.t, err)
	return o
}

func (e *env) entries(yaml string) []scheduler.Entry {
	e.t.Helper()
	entries, err := scheduler.Parse("schedules.yaml", []byte(yaml))
	require.NoError(e.t, err)
	return entries
}

func (e *env) scheduler(cfg scheduler.Config, o *orchestrator.Orchestrator) *scheduler.Scheduler {
	e.t.Helper()
	cfg.Project, cfg.UserDir = e.project, "-"
	if cfg.FunctionsUnused == 0 {
		cfg.FunctionsUnused = -1 // tests share a Redis: only the test of pruning prunes
	}
	if cfg.Redis == nil {
		cfg.Redis = o.Runtime().Services().Redis
	}
	s, err := scheduler.New(cfg, o)
	require.NoError(e.t, err)
	e.t.Cleanup(s.Stop)
	return s
}

// claimDead claims created thread id as a worker does, and then lets its
// lease go as a worker that died does: the thread is running, and nobody
// holds it.
func claimDead(t *testing.T, o *orchestrator.Orchestrator, id string) *registry.Record {
	t.Helper()
	ctx := context.Background()
	c, err := o.Runtime().Services().Activations.Claim(ctx, id, "start", 0, "dead", id, time.Minute)
	require.NoError(t, err)
	require.NoError(t, o.Runtime().Services().Redis.Del(ctx, o.Runtime().Services().Keys.Lease(id)).Err())
	return c.Record
}

func (e *env) bundle() string {
	e.t.Helper()
	d, err := launch.ProjectBundle(context.Background(), e.store, e.project, "", "", nil)
	require.NoError(e.t, err)
	return d
}

func (e *env) threads(o *orchestrator.Orchestrator, directive string) []*registry.Record {
	e.t.Helper()
	recs, err := o.Threads(context.Background(), registry.Filter{Directive: directive})
	require.NoError(e.t, err)
	return recs
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
