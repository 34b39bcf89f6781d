// Package testenv gives integration tests real services with isolation.
//
// Redis: SPOOL_TEST_REDIS_URL when set; else a redis-server found on PATH,
// started once per test binary on a free loopback port; else an embedded
// miniredis whose clock is advanced every 250ms (asynq needs TTLs to count
// down). NewRedisOn gives the other topologies: a three-node Redis Cluster
// (SPOOL_TEST_REDIS_CLUSTER_URL, else started from redis-server) and a
// master, replica and sentinel (SPOOL_TEST_REDIS_SENTINEL_URL, else started
// from redis-server and redis-sentinel). S3: SPOOL_TEST_S3_ENDPOINT (+
// _BUCKET, AWS keys) when set; else a versitygw on PATH started once per
// test binary; else the test skips.
//
// With SPOOL_TEST_REQUIRE_REAL=1 (set by .ci/run) a test that would fall back
// to miniredis, or skip for want of S3, fails instead: CI proves every
// integration test ran against the real services.
//
// Every caller gets a random namespace (Redis) or key prefix (S3), never a
// FLUSHDB. Packages that use this call testenv.Main from TestMain so that the
// servers it started are stopped.
package testenv

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/spool-run/spool/stack"
)

// RequireReal reports whether tests must use real services (CI).
func RequireReal() bool { return os.Getenv("SPOOL_TEST_REQUIRE_REAL") == "1" }

// Redis is a Redis server for one test.
type Redis struct {
	URL       string        // redis://127.0.0.1:port/0, or a redis-cluster:// or redis-sentinel:// URL
	Addr      string        // 127.0.0.1:port (Cluster, Sentinel: the URL's first host)
	Client    *redis.Client // closed at test cleanup; nil on Cluster
	Namespace string        // random keyspace namespace for this test
	Embedded  bool          // true when the server is miniredis
	Topology  Topology      // Standalone, Cluster or Sentinel
	// Universal is a client of any topology (Client itself where there is
	// one), closed at test cleanup.
	Universal redis.UniversalClient
}

var (
	redisOnce sync.Once
	redisURL  string
	redisEmb  bool
	redisErr  error
	stops     []func()
	stopsMu   sync.Mutex
)

func addStop(f func()) {
	stopsMu.Lock()
	stops = append(stops, f)
	stopsMu.Unlock()
}

// AtExit has Main and MainLeakFree run f after the tests, with the
// servers' stops: what a test harness keeps for a whole test binary
// (spooltest's spool binary) goes with it.
func AtExit(f func()) { addStop(f) }

// Main runs the tests and stops the servers this package started.
func Main(m *testing.M) {
	code := m.Run()
	stopAll()
	os.Exit(code)
}

// stopAll stops every server this package started, last first.
func stopAll() {
	stopsMu.Lock()
	defer stopsMu.Unlock()
	for i := len(stops) - 1; i >= 0; i-- {
		stops[i]()
	}
	stops = nil
}

// RandomID returns n random bytes as hex.
func RandomID(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// FreePort returns a free TCP port on 127.0.0.1 (stack.FreePort).
func FreePort() (int, error) { return stack.FreePort() }

func startRedis() (string, bool, error) {
	if u := os.Getenv("SPOOL_TEST_REDIS_URL"); u != "" {
		return u, false, nil
	}
	if bin, err := exec.LookPath("redis-server"); err == nil {
		port, err := FreePort()
		if err != nil {
			return "", false, err
		}
		dir, err := os.MkdirTemp("", "spool-test-redis-")
		if err != nil {
			return "", false, err
		}
		cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--dir", dir)
		if err := cmd.Start(); err != nil {
			return "", false, fmt.Errorf("start redis-server: %w", err)
		}
		addStop(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = os.RemoveAll(dir) })
		url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
		if err := stack.WaitRedis(url, 10*time.Second); err != nil {
			return "", false, err
		}
		return url, false, nil
	}
	m, stop, err := stack.StartMiniredis()
	if err != nil {
		return "", false, err
	}
	addStop(stop)
	return "redis://" + m.Addr() + "/0", true, nil
}

// NewRedis returns the shared test Redis with a fresh random namespace and a
// client closed at cleanup. It fails the test when RequireReal and only the
// embedded fallback is available.
func NewRedis(t testing.TB) *Redis {
	t.Helper()
	redisOnce.Do(func() { redisURL, redisEmb, redisErr = startRedis() })
	if redisErr != nil {
		t.Fatalf("testenv: redis: %v", redisErr)
	}
	if redisEmb && RequireReal() {
		t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no real Redis (set SPOOL_TEST_REDIS_URL or put redis-server on PATH)")
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("testenv: parse %q: %v", redisURL, err)
	}
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	return &Redis{URL: redisURL, Addr: opt.Addr, Client: c, Namespace: "t" + RandomID(6), Embedded: redisEmb,
		Topology: Standalone, Universal: c}
}

// S3 is an S3-compatible server for one test.
type S3 struct {
	Endpoint  string
	Bucket    string
	Region    string
	AccessKey string
	SecretKey string
	Prefix    string // random key prefix for this test, ending in "/"
}

var (
	s3Once sync.Once
	s3Srv  *S3
	s3Err  error
)

func startS3() (*S3, error) {
	if ep := os.Getenv("SPOOL_TEST_S3_ENDPOINT"); ep != "" {
		return &S3{Endpoint: ep, Bucket: envOr("SPOOL_TEST_S3_BUCKET", "spool-test"), Region: envOr("SPOOL_TEST_S3_REGION", "us-east-1"),
			AccessKey: envOr("AWS_ACCESS_KEY_ID", "spooltest"), SecretKey: envOr("AWS_SECRET_ACCESS_KEY", "spooltestsecret")}, nil
	}
	bin := versitygwBinary()
	if bin == "" {
		return nil, nil
	}
	v, err := newVersity(bin)
	if err != nil {
		return nil, err
	}
	if err := v.start(); err != nil {
		return nil, err
	}
	addStop(func() { v.stop(); _ = os.RemoveAll(v.dir) })
	return &v.S3, nil
}

// versitygwBinary is the versitygw on PATH (or in ~/go/bin); "" for none.
func versitygwBinary() string {
	if bin, err := exec.LookPath("versitygw"); err == nil {
		return bin
	}
	if gp := filepath.Join(os.Getenv("HOME"), "go", "bin", "versitygw"); fileExists(gp) {
		return gp
	}
	return ""
}

// versity is a versitygw process serving one directory on one port, which
// may be stopped and started again on the same port and data.
type versity struct {
	S3
	bin, dir string
	port     int
	mu       sync.Mutex
	cmd      *exec.Cmd
}

func newVersity(bin string) (*versity, error) {
	port, err := FreePort()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "spool-test-s3-")
	if err != nil {
		return nil, err
	}
	const bucket = "spool-test"
	if err := os.MkdirAll(filepath.Join(dir, bucket), 0o755); err != nil {
		return nil, err
	}
	return &versity{bin: bin, dir: dir, port: port, S3: S3{Endpoint: fmt.Sprintf("http://127.0.0.1:%d", port), Bucket: bucket,
		Region: "us-east-1", AccessKey: "spooltest", SecretKey: "spooltestsecret"}}, nil
}

// start runs the server and waits until it accepts connections.
func (v *versity) start() error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cmd != nil {
		return nil
	}
	cmd := exec.Command(v.bin, "--access", v.AccessKey, "--secret", v.SecretKey, "--port", fmt.Sprintf("127.0.0.1:%d", v.port), "posix", v.dir)
	cmd.Stdout, cmd.Stderr = nil, nil
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start versitygw: %w", err)
	}
	v.cmd = cmd
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", v.port), 200*time.Millisecond)
		if err == nil {
			c.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("versitygw on port %d not ready: %w", v.port, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop kills the server (its data stays).
func (v *versity) stop() {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.cmd != nil {
		_ = v.cmd.Process.Kill()
		_ = v.cmd.Wait()
		v.cmd = nil
	}
}

// PrivateS3 is an S3-compatible server (versitygw) of one test's own,
// which the test may stop and start again to make an outage.
type PrivateS3 struct {
	*S3
	v *versity
}

// NewPrivateS3 starts a versitygw for t alone. Without versitygw it skips
// the test, or fails it when RequireReal.
func NewPrivateS3(t testing.TB) *PrivateS3 {
	t.Helper()
	bin := versitygwBinary()
	if bin == "" {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no versitygw on PATH for a private S3 server")
		}
		t.Skip("no versitygw on PATH: the outage test needs a server of its own")
	}
	v, err := newVersity(bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.stop(); _ = os.RemoveAll(v.dir) })
	s := v.S3
	s.Prefix = "t" + RandomID(6) + "/"
	return &PrivateS3{S3: &s, v: v}
}

// Stop kills the server: every request fails until Start.
func (p *PrivateS3) Stop() { p.v.stop() }

// Start runs the server again, on the same port and data.
func (p *PrivateS3) Start() error { return p.v.start() }

// NewS3 returns the shared S3-compatible test server with a random key
// prefix. With no server available it skips the test, or fails it when
// RequireReal.
func NewS3(t testing.TB) *S3 {
	t.Helper()
	s := MaybeS3(t)
	if s == nil {
		t.Skip("no S3-compatible server: set SPOOL_TEST_S3_ENDPOINT or install versitygw")
	}
	return s
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// MaybeS3 returns the S3 test server, or nil when none is available (and
// tests need not use real services). Under RequireReal a missing server
// fails the test.
func MaybeS3(t testing.TB) *S3 {
	t.Helper()
	s3Once.Do(func() { s3Srv, s3Err = startS3() })
	if s3Err != nil {
		t.Fatalf("testenv: s3: %v", s3Err)
	}
	if s3Srv == nil {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no S3 server (set SPOOL_TEST_S3_ENDPOINT or put versitygw on PATH)")
		}
		return nil
	}
	s := *s3Srv
	s.Prefix = "t" + RandomID(6) + "/"
	return &s
}

// MainLeakFree is Main for packages that also check for leaked goroutines
// (goleak): the tests run, the servers this package started stop, then
// any goroutine still running fails the binary.
func MainLeakFree(m *testing.M, opts ...goleak.Option) {
	code := m.Run()
	stopAll()
	if code == 0 {
		if err := goleak.Find(opts...); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
