package testenv

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/stack"
)

// PrivateRedis is a redis-server of one test's own, with an append-only
// file (appendonly yes, appendfsync everysec), which the test may kill
// and start again, from the AOF it left or from an older copy of it: the
// writes Redis loses when it crashes.
type PrivateRedis struct {
	*Redis
	bin, dir string
	port     int
	logf     *os.File
	mu       sync.Mutex
	cmd      *exec.Cmd
}

// aofDir is the AOF directory (appenddirname) inside the data directory.
const aofDir = "appendonlydir"

// NewPrivateRedis starts a redis-server for t alone, with an AOF. Without
// redis-server it skips the test, or fails it when RequireReal.
func NewPrivateRedis(t testing.TB) *PrivateRedis {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no redis-server on PATH for a private Redis")
		}
		t.Skip("no redis-server on PATH: the test needs a Redis of its own")
	}
	port, err := FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logf, err := os.Create(filepath.Join(dir, "redis.log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &PrivateRedis{bin: bin, dir: dir, port: port, logf: logf}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Kill(); _ = logf.Close() })
	url := fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	opt.PoolSize = 64
	c := redis.NewClient(opt)
	t.Cleanup(func() { _ = c.Close() })
	p.Redis = &Redis{URL: url, Addr: opt.Addr, Client: c, Namespace: "t" + RandomID(6), Topology: Standalone, Universal: c}
	return p
}

// Start runs the server on its port and data directory (loading the AOF
// there) and waits until it answers.
func (p *PrivateRedis) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return nil
	}
	cmd := exec.Command(p.bin, "--port", fmt.Sprint(p.port), "--bind", "127.0.0.1", "--dir", p.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec", "--appenddirname", aofDir,
		"--aof-load-truncated", "yes")
	cmd.Stdout, cmd.Stderr = p.logf, p.logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	p.cmd = cmd
	if err := stack.WaitRedis(fmt.Sprintf("redis://127.0.0.1:%d/0", p.port), 30*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, p.LogTail())
	}
	return nil
}

// Kill kills the server with SIGKILL, as a crash: what it had not yet
// written to its AOF is lost.
func (p *PrivateRedis) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		_ = p.cmd.Process.Kill()
		_ = p.cmd.Wait()
		p.cmd = nil
	}
}

// CopyAOF copies the server's AOF directory as it is now (what a disk
// holds at this moment) and returns the copy's path, for RestoreAOF.
func (p *PrivateRedis) CopyAOF(t testing.TB) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), aofDir)
	if err := copyDir(filepath.Join(p.dir, aofDir), dst); err != nil {
		t.Fatalf("copy the AOF: %v", err)
	}
	return dst
}

// RestoreAOF replaces the AOF directory of a stopped server with a copy
// made by CopyAOF; the next Start loads it.
func (p *PrivateRedis) RestoreAOF(copied string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("restore the AOF: the server is running")
	}
	live := filepath.Join(p.dir, aofDir)
	if err := os.RemoveAll(live); err != nil {
		return err
	}
	return copyDir(copied, live)
}

// LogTail is the end of the server's log, for failures.
func (p *PrivateRedis) LogTail() string {
	b, _ := os.ReadFile(filepath.Join(p.dir, "redis.log"))
	if len(b) > 3000 {
		b = b[len(b)-3000:]
	}
	return string(b)
}

// copyDir copies the regular files of directory src into dst (made).
func copyDir(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	for _, en := range entries {
		if !en.Type().IsRegular() {
			continue
		}
		if err := copyFile(filepath.Join(src, en.Name()), filepath.Join(dst, en.Name())); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(dst)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
