package testenv

import (
	"bufio"
	"io"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// AIMockVersion is the version of the mock LLM server @copilotkit/aimock
// the provider tests run (.ci/run installs the same one).
const AIMockVersion = "1.43.0"

// aimockPackage: a server that speaks the Anthropic Messages and OpenAI
// Chat Completions APIs (SSE included) from fixture files, with faults
// injected at given rates (--chaos-ratelimit: 429 with retry-after,
// --chaos-drop: 500, --chaos-malformed: a body that is not JSON,
// --chaos-disconnect: the connection dropped) and a journal of what it
// answered (GET /__aimock/journal).
var aimockPackage = npmPackage{name: "@copilotkit/aimock", version: AIMockVersion, dir: "aimock-" + AIMockVersion,
	entry: "dist/cli.js", env: "SPOOL_TEST_AIMOCK"}

// AIMock is the mock LLM server @copilotkit/aimock, to run with node.
type AIMock struct {
	// Node is the node executable.
	Node string
	// Entry is the server's command line (dist/cli.js).
	Entry string
}

var (
	aimockOnce sync.Once
	aimock     *AIMock
	aimockErr  error
)

// FindAIMock returns @copilotkit/aimock (AIMockVersion): SPOOL_TEST_AIMOCK
// (its dist/cli.js) when set; else the copy installed under the user's
// cache directory, installed there with npm the first time. Without node
// (or npm, for the first install) the test skips, or fails under
// SPOOL_TEST_REQUIRE_REAL=1.
func FindAIMock(t testing.TB) *AIMock {
	t.Helper()
	aimockOnce.Do(func() {
		node, entry, err := aimockPackage.find()
		aimock, aimockErr = &AIMock{Node: node, Entry: entry}, err
	})
	if aimockErr != nil {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no aimock: %v", aimockErr)
		}
		t.Skipf("testenv: no aimock: %v", aimockErr)
	}
	return aimock
}

// AIMockServer is a running aimock.
type AIMockServer struct {
	// URL is its base URL, http://127.0.0.1:PORT: ANTHROPIC_BASE_URL, and
	// OPENAI_BASE_URL with /v1.
	URL string
	mu  sync.Mutex
	out strings.Builder
}

// Log is what the server printed so far.
func (s *AIMockServer) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

var aimockListening = regexp.MustCompile(`listening on (http://\S+)`)

// Start runs the server on a free loopback port, answering from the
// fixtures file, with flags added (--chaos-*), until the test ends. Its
// journal keeps every request.
func (a *AIMock) Start(t testing.TB, fixtures string, flags ...string) *AIMockServer {
	t.Helper()
	args := append([]string{a.Entry, "--port", "0", "--host", "127.0.0.1", "--fixtures", fixtures,
		"--journal-max", "0", "--log-level", "info"}, flags...)
	cmd := exec.Command(a.Node, args...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start aimock: %v", err)
	}
	srv := &AIMockServer{}
	url := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			srv.mu.Lock()
			srv.out.WriteString(line + "\n")
			srv.mu.Unlock()
			if m := aimockListening.FindStringSubmatch(line); m != nil {
				select {
				case url <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
		<-read
	})
	select {
	case srv.URL = <-url:
		return srv
	case <-exited:
		t.Fatalf("testenv: aimock exited before it listened:\n%s", srv.Log())
	case <-time.After(30 * time.Second):
		t.Fatalf("testenv: aimock did not listen within 30s:\n%s", srv.Log())
	}
	return nil
}
