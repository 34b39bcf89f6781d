// Package spooltest runs spool the way users do, for end-to-end tests: the
// real binary (built once per test binary), real worker processes, the test
// Redis and, when available, the S3-compatible test server, each test in its
// own namespace, key prefix, project directory and signing key.
package spooltest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary builds ./cmd/spool once per test binary and returns its path.
// The build (about 180 MB with -race) is removed when the test binary's
// TestMain ends (testenv.Main, MainLeakFree): left behind, every run
// would leave another on the disk.
func Binary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..", "..")
		dir, err := os.MkdirTemp("", "spool-bin-")
		if err != nil {
			buildErr = err
			return
		}
		testenv.AtExit(func() { _ = os.RemoveAll(dir) })
		binPath = filepath.Join(dir, "spool")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command("go", append(args, "./cmd/spool")...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// Options shape an Env.
type Options struct {
	// Files are written into the project directory (path → content);
	// paths ending in ".sh" or under .ai/tools/ are made executable.
	Files map[string]string
	// LeaseTTL of activations in every process. Default 2s, so crash
	// recovery is quick.
	LeaseTTL time.Duration
	// NoS3 forces the local blob store even when an S3 server is there.
	NoS3 bool
	// Topology of the Redis every process uses (testenv.NewRedisOn).
	// Default testenv.DefaultTopology(): Standalone unless
	// SPOOL_TEST_TOPOLOGY says otherwise.
	Topology testenv.Topology
	// S3, when set, is the S3 server to use (a test's own, e.g.
	// testenv.NewPrivateS3, which it may stop and start).
	S3 *testenv.S3
	// Redis, when set, is the Redis every process uses (a test's own,
	// e.g. testenv.NewPrivateRedis, which it may kill and restart).
	Redis *testenv.Redis
}

// Env is one test's spool installation.
type Env struct {
	T         testing.TB
	Bin       string
	Redis     *testenv.Redis
	S3        *testenv.S3 // nil: local blob store in DataDir
	Project   string
	DataDir   string
	KeyDir    string
	Namespace string
	Vars      []string // the SPOOL_* environment of every process

	Orch  *orchestrator.Orchestrator // in-process view of the same state
	Store blobstore.Store
	// Keys are the namespace's Redis keys, for a test that reads or
	// breaks what Redis holds; Keyring verifies the transcripts.
	Keys    keyspace.Space
	Keyring *transcript.Keyring

	mu    sync.Mutex
	procs []*Proc
}

// New makes an Env; processes are stopped at cleanup.
func New(t testing.TB, o Options) *Env {
	t.Helper()
	if o.LeaseTTL == 0 {
		o.LeaseTTL = 2 * time.Second
	}
	if o.Topology == "" {
		o.Topology = testenv.DefaultTopology()
	}
	e := &Env{T: t, Bin: Binary(t), Redis: o.Redis}
	if e.Redis == nil {
		e.Redis = testenv.NewRedisOn(t, o.Topology)
	}
	switch {
	case o.S3 != nil:
		e.S3 = o.S3
	case !o.NoS3:
		e.S3 = testenv.MaybeS3(t)
	}
	root := t.TempDir()
	e.Project, e.DataDir, e.KeyDir = filepath.Join(root, "project"), filepath.Join(root, "data"), filepath.Join(root, "keys")
	e.Namespace = e.Redis.Namespace
	for p, content := range o.Files {
		full := filepath.Join(e.Project, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(p, ".sh") || strings.Contains(p, ".ai/tools/") && !strings.HasSuffix(p, ".yaml") {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(e.Project, 0o755); err != nil {
		t.Fatal(err)
	}
	signer, _, err := transcript.InitKeys(e.KeyDir, false)
	if err != nil {
		t.Fatal(err)
	}
	e.Vars = []string{
		"SPOOL_REDIS_URL=" + e.Redis.URL,
		"SPOOL_NAMESPACE=" + e.Namespace,
		"SPOOL_PROJECT=" + e.Project,
		"SPOOL_DATA_DIR=" + e.DataDir,
		"SPOOL_SIGNING_KEY=" + filepath.Join(e.KeyDir, transcript.SigningKeyFile),
		"SPOOL_LEASE_TTL=" + o.LeaseTTL.String(),
		"SPOOL_LOG_LEVEL=info",
		"HOME=" + root,
	}
	if e.S3 != nil {
		e.Vars = append(e.Vars,
			"SPOOL_S3_ENDPOINT="+e.S3.Endpoint, "SPOOL_S3_BUCKET="+e.S3.Bucket, "SPOOL_S3_REGION="+e.S3.Region,
			"SPOOL_S3_PATH_STYLE=true", "SPOOL_S3_PREFIX="+e.S3.Prefix,
			"AWS_ACCESS_KEY_ID="+e.S3.AccessKey, "AWS_SECRET_ACCESS_KEY="+e.S3.SecretKey)
		e.Store, err = blobstore.NewS3(context.Background(), blobstore.S3Config{Endpoint: e.S3.Endpoint, Bucket: e.S3.Bucket,
			Region: e.S3.Region, PathStyle: true, Prefix: e.S3.Prefix, AccessKey: e.S3.AccessKey, SecretKey: e.S3.SecretKey})
	} else {
		e.Store, err = blobstore.NewLocal(filepath.Join(e.DataDir, "blobs"))
	}
	if err != nil {
		t.Fatal(err)
	}
	keyring, err := transcript.LoadKeyring(e.KeyDir, signer)
	if err != nil {
		t.Fatal(err)
	}
	client := asynq.NewClientFromRedisClient(e.Redis.Universal)
	// The layout the CLI processes will find (or record) for the namespace.
	ks, err := registry.Layout(context.Background(), e.Redis.Universal, keyspace.New(e.Namespace), registry.DefaultShards(e.Redis.Universal), false)
	if err != nil {
		t.Fatal(err)
	}
	e.Orch, err = orchestrator.New(orchestrator.Config{Namespace: e.Namespace, Shards: ks.Shards(), LeaseTTL: o.LeaseTTL}, e.Redis.Universal, e.Store,
		&queue.Enqueuer{Client: client}, signer, keyring)
	if err != nil {
		t.Fatal(err)
	}
	e.Keys, e.Keyring = keyspace.NewSharded(e.Namespace, ks.Shards()), keyring
	t.Cleanup(e.stopAll)
	return e
}

// Result is a finished CLI command.
type Result struct {
	Stdout, Stderr string
	Code           int
}

// JSON decodes the command's stdout into v, failing the test on error.
func (r Result) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(r.Stdout), v); err != nil {
		t.Fatalf("stdout is not JSON (%v):\n%s\nstderr:\n%s", err, r.Stdout, r.Stderr)
	}
}

// Spool runs the CLI with args and returns its output and exit code.
func (e *Env) Spool(args ...string) Result {
	e.T.Helper()
	return e.SpoolContext(context.Background(), nil, args...)
}

// SpoolContext runs the CLI with extra environment.
func (e *Env) SpoolContext(ctx context.Context, env []string, args ...string) Result {
	e.T.Helper()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e.Bin, args...)
	cmd.Env = append(append(baseEnv(), e.Vars...), env...)
	cmd.Dir = e.Project
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		e.T.Fatalf("spool %v: %v", args, err)
	}
	return Result{Stdout: out.String(), Stderr: errb.String(), Code: code}
}

// baseEnv is the part of the test's environment a spool process keeps
// (none of its SPOOL_*, provider, AWS or OTEL_* settings: a test passes
// its own).
// A binary built with -race sleeps a second at exit to let its race
// reporter finish (atexit_sleep_ms); every `spool` command of every test
// would pay it, so it is 0 unless the environment sets GORACE.
func baseEnv() []string {
	var out []string
	gorace := false
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "SPOOL_") || strings.HasPrefix(kv, "AWS_") || strings.HasPrefix(kv, "ANTHROPIC_") || strings.HasPrefix(kv, "OPENAI_") ||
			strings.HasPrefix(kv, "OTEL_") {
			continue
		}
		gorace = gorace || strings.HasPrefix(kv, "GORACE=")
		out = append(out, kv)
	}
	if !gorace {
		out = append(out, "GORACE=atexit_sleep_ms=0")
	}
	return out
}

// Proc is a long-running spool process (a worker).
type Proc struct {
	Cmd  *exec.Cmd
	log  *bytes.Buffer
	mu   *sync.Mutex
	done chan struct{}
	err  error
}

// Log returns what the process wrote so far.
func (p *Proc) Log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

// lockedBuffer serializes writes from the process's stdout and stderr.
type lockedBuffer struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// Start starts a long-running spool command (e.g. "worker", "--concurrency", "2").
func (e *Env) Start(env []string, args ...string) *Proc {
	e.T.Helper()
	cmd := exec.Command(e.Bin, args...)
	cmd.Env = append(append(baseEnv(), e.Vars...), env...)
	cmd.Dir = e.Project
	p := &Proc{Cmd: cmd, log: &bytes.Buffer{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	w := lockedBuffer{mu: p.mu, b: p.log}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		e.T.Fatalf("start spool %v: %v", args, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p
}

// StartWorker starts `spool worker` with the given extra flags.
func (e *Env) StartWorker(flags ...string) *Proc {
	e.T.Helper()
	return e.Start(nil, append([]string{"worker"}, flags...)...)
}

// Stop sends SIGTERM and waits up to d for the process to exit (then kills it).
func (p *Proc) Stop(d time.Duration) error {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		_ = p.Cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("did not stop within %s", d)
	}
}

// Kill sends SIGKILL and waits.
func (p *Proc) Kill() {
	_ = p.Cmd.Process.Kill()
	<-p.done
}

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (e *Env) stopAll() {
	e.mu.Lock()
	procs := e.procs
	e.mu.Unlock()
	for _, p := range procs {
		if !p.Exited() {
			if err := p.Stop(20 * time.Second); err != nil {
				e.T.Logf("process %v: %v\n%s", p.Cmd.Args, err, tail(p.Log(), 4000))
			}
		}
		if e.T.Failed() {
			e.T.Logf("log of %v:\n%s", p.Cmd.Args, tail(p.Log(), 6000))
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// Wait waits for threads through the in-process orchestrator.
func (e *Env) Wait(ids []string, timeout time.Duration) map[string]*registry.Record {
	e.T.Helper()
	res, err := e.Orch.Wait(context.Background(), ids, timeout)
	if err != nil {
		e.T.Fatalf("wait for %d threads: %v; %s", len(ids), err, e.NotEnded(ids, res))
	}
	return res
}

// NotEnded says which of ids res does not hold and where the first of
// them stand: a wait that ran out of time says what it waited on.
func (e *Env) NotEnded(ids []string, res map[string]*registry.Record) string {
	var left []string
	for _, id := range ids {
		if _, ok := res[id]; !ok {
			left = append(left, id)
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%d not ended", len(left))
	byState := map[string]int{}
	for i, id := range left {
		rec, err := e.Orch.Record(context.Background(), id)
		if err != nil {
			fmt.Fprintf(&b, "\n  %s: %v", id, err)
			continue
		}
		state := string(rec.Status)
		if rec.WaitingFor != "" {
			state += " for " + rec.WaitingFor
		}
		byState[state]++
		if i < 20 {
			fmt.Fprintf(&b, "\n  %s: %s activation %d version %d key %q since %v position %d updated %s",
				id, state, rec.Activation, rec.Version, rec.WaitingKey, rec.WaitingSince, rec.Position,
				rec.UpdatedAt.Format(time.RFC3339Nano))
		}
	}
	fmt.Fprintf(&b, "\n  by state: %v", byState)
	return b.String()
}
