package mcpclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/tools"
)

// setup is a pool with one stdio server, "h", the test binary as
// helperServer, and the environment the pool reads.
type setup struct {
	pool   *Pool
	mcp    *config.MCP
	starts string // the helper's start log
	env    *tools.Env
	store  *blobstore.Memory
}

func newSetup(t *testing.T, timeout time.Duration) *setup {
	t.Helper()
	starts := filepath.Join(t.TempDir(), "starts")
	worker := map[string]string{"PATH": os.Getenv("PATH"), "VISIBLE": "yes", "MY_TOKEN": "worker-secret", "SPOOL_REDIS_URL": "redis://:pw@h/0"}
	pool, err := New(Config{
		PassEnv:        []string{"PATH", "VISIBLE", "MY_TOKEN", "SPOOL_REDIS_URL"},
		LookupEnv:      func(k string) (string, bool) { v, ok := worker[k]; return v, ok },
		ConnectTimeout: 20 * time.Second,
		TerminateGrace: 500 * time.Millisecond,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	m := &config.MCP{Servers: map[string]config.MCPServer{"h": {
		Command: []string{os.Args[0], "-test.run=^$"},
		Env:     map[string]string{helperEnv: "1", "HELPER_STARTS": starts, "FROM_YAML": "y"},
		Timeout: timeout,
	}}}
	store := blobstore.NewMemory()
	return &setup{pool: pool, mcp: m, starts: starts, store: store,
		env: &tools.Env{ThreadID: "t/x-1-ab", TreeID: "t/x-1-ab", Store: store}}
}

func (s *setup) tools(t *testing.T) map[string]tools.Tool {
	t.Helper()
	list, err := s.pool.Tools(context.Background(), s.mcp, nil)
	require.NoError(t, err)
	byID := map[string]tools.Tool{}
	for _, tl := range list {
		byID[tl.Def().Name] = tl
	}
	return byID
}

func (s *setup) startCount(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(s.starts)
	if errors.Is(err, os.ErrNotExist) {
		return 0
	}
	require.NoError(t, err)
	return len(strings.Fields(string(b)))
}

func run(t *testing.T, tl tools.Tool, env *tools.Env, input string) tools.Result {
	t.Helper()
	res, err := tl.Run(context.Background(), env, json.RawMessage(input))
	require.NoError(t, err)
	return res
}

func TestToolsAndResults(t *testing.T) {
	t.Parallel()
	s := newSetup(t, 10*time.Second)
	byID := s.tools(t)
	var ids []string
	for id := range byID {
		ids = append(ids, id)
	}
	require.ElementsMatch(t, []string{"mcp/h/crash", "mcp/h/echo", "mcp/h/env", "mcp/h/fail", "mcp/h/image", "mcp/h/pid",
		"mcp/h/sleep", "mcp/h/structured-only", "mcp/h/weather"}, ids, "bad.name cannot be a tool id and is left out")
	require.Equal(t, "Echoes message", byID["mcp/h/echo"].Def().Description)
	require.Contains(t, string(byID["mcp/h/echo"].Def().InputSchema), `"message"`, "the server's input schema")

	require.Equal(t, tools.Result{Output: "echo: hi"}, run(t, byID["mcp/h/echo"], s.env, `{"message":"hi"}`))

	// The environment: PassEnv and mcp.yaml's env, never a credential.
	require.Equal(t, `VISIBLE="yes" set=true`, run(t, byID["mcp/h/env"], s.env, `{"name":"VISIBLE"}`).Output)
	require.Equal(t, `FROM_YAML="y" set=true`, run(t, byID["mcp/h/env"], s.env, `{"name":"FROM_YAML"}`).Output)
	require.Equal(t, `MY_TOKEN="" set=false`, run(t, byID["mcp/h/env"], s.env, `{"name":"MY_TOKEN"}`).Output)
	require.Equal(t, `SPOOL_REDIS_URL="" set=false`, run(t, byID["mcp/h/env"], s.env, `{"name":"SPOOL_REDIS_URL"}`).Output)

	// An image is kept as an artifact of the calling thread.
	res := run(t, byID["mcp/h/image"], s.env, `{}`)
	require.False(t, res.IsError)
	lines := strings.Split(res.Output, "\n")
	require.Len(t, lines, 2, res.Output)
	require.Equal(t, "a dot", lines[0])
	require.Regexp(t, `^\[image image/png, \d+ bytes, kept as artifact threads/t/x-1-ab/artifacts/mcp-[0-9a-f]{32}\.png\]$`, lines[1])
	_, key, ok := strings.Cut(lines[1], "kept as artifact ")
	require.True(t, ok, lines[1])
	key = strings.TrimSuffix(key, "]")
	got, err := s.store.Get(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, tinyPNG, got)

	// Structured content: said once.
	require.JSONEq(t, `{"temperature":21.5,"conditions":"clear"}`, run(t, byID["mcp/h/weather"], s.env, `{}`).Output)
	require.Equal(t, "see structured\n{\"n\":7}", run(t, byID["mcp/h/structured-only"], s.env, "").Output)

	// Failures the model reads.
	res = run(t, byID["mcp/h/fail"], s.env, `{}`)
	require.True(t, res.IsError)
	require.Contains(t, res.Output, "the disk is full")
	res = run(t, byID["mcp/h/echo"], s.env, `["not", "an", "object"]`)
	require.Equal(t, tools.Result{Output: "mcp/h/echo takes a JSON object of arguments", IsError: true}, res)
	res = run(t, byID["mcp/h/echo"], s.env, `{"message": 5}`)
	require.True(t, res.IsError, "the server refuses arguments its schema does not take: %s", res.Output)

	require.Equal(t, 1, s.startCount(t), "one process for every call")
	require.Equal(t, 1, s.pool.Starts("h"))
	_ = s.tools(t)
	require.Equal(t, 1, s.startCount(t), "a second listing uses the same server")
}

func TestCrashMidCallIsAToolErrorAndTheNextCallRestarts(t *testing.T) {
	t.Parallel()
	s := newSetup(t, 10*time.Second)
	byID := s.tools(t)
	res := run(t, byID["mcp/h/crash"], s.env, `{}`)
	require.True(t, res.IsError)
	require.Contains(t, res.Output, "MCP server h exited during the call")
	require.Contains(t, res.Output, "started again on the next call")
	require.Contains(t, res.Output, "helper: crashing as asked", "the end of its stderr")
	require.Equal(t, 1, s.startCount(t))

	require.Equal(t, "echo: again", run(t, byID["mcp/h/echo"], s.env, `{"message":"again"}`).Output)
	require.Equal(t, 2, s.startCount(t), "the next call started it again")

	// A server killed between calls is started again by the next call,
	// which runs normally.
	pid, err := strconv.Atoi(run(t, byID["mcp/h/pid"], s.env, `{}`).Output)
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
	require.Eventually(t, func() bool {
		s.pool.mu.Lock()
		defer s.pool.mu.Unlock()
		for _, srv := range s.pool.servers {
			srv.mu.Lock()
			gone := srv.conn == nil
			srv.mu.Unlock()
			if !gone {
				return false
			}
		}
		return true
	}, 10*time.Second, 20*time.Millisecond, "the pool notices the exit")
	require.Equal(t, "echo: after", run(t, byID["mcp/h/echo"], s.env, `{"message":"after"}`).Output)
	require.Equal(t, 3, s.startCount(t))
	require.Equal(t, 3, s.pool.Starts("h"))
}

func TestTimeoutAndCancel(t *testing.T) {
	t.Parallel()
	s := newSetup(t, 300*time.Millisecond)
	byID := s.tools(t)
	start := time.Now()
	res := run(t, byID["mcp/h/sleep"], s.env, `{"seconds": 30}`)
	require.True(t, res.IsError)
	require.Contains(t, res.Output, "did not answer within 300ms")
	require.Less(t, time.Since(start), 10*time.Second)
	require.Equal(t, "echo: still", run(t, byID["mcp/h/echo"], s.env, `{"message":"still"}`).Output, "the server is kept")
	require.Equal(t, 1, s.startCount(t))

	// The caller's context ending (a cancel, the duration limit) is the
	// caller's to handle: a Go error, not a result.
	s.mcp.Servers["h"] = withTimeout(s.mcp.Servers["h"], time.Minute)
	byID = s.tools(t)
	ctx, cancel := context.WithCancelCause(context.Background())
	errStop := errors.New("cancel requested")
	time.AfterFunc(200*time.Millisecond, func() { cancel(errStop) })
	_, err := byID["mcp/h/sleep"].Run(ctx, s.env, json.RawMessage(`{"seconds": 30}`))
	require.ErrorIs(t, err, errStop)
	require.Equal(t, 1, s.startCount(t), "the same server: the timeout is not part of its identity")
}

func withTimeout(s config.MCPServer, d time.Duration) config.MCPServer {
	s.Timeout = d
	return s
}

func TestConfigErrorsAndClose(t *testing.T) {
	t.Parallel()
	s := newSetup(t, time.Second)
	ctx := context.Background()
	for name, srv := range map[string]config.MCPServer{
		"missing": {Command: []string{"/nonexistent/spool-mcp-server"}},
		"unset":   {Command: []string{"x"}, Env: map[string]string{"K": "${NOT_SET_ANYWHERE}"}},
		"own":     {URL: "http://127.0.0.1:1/mcp", Headers: map[string]string{"A": "${SPOOL_REDIS_URL}"}},
	} {
		_, err := s.pool.Tools(ctx, &config.MCP{Servers: map[string]config.MCPServer{name: srv}}, nil)
		require.ErrorIs(t, err, ErrConfig, name)
	}
	// Unreachable is not a configuration error: a retry may find it up.
	_, err := s.pool.Tools(ctx, &config.MCP{Servers: map[string]config.MCPServer{"down": {URL: "http://127.0.0.1:1/mcp"}}}, nil)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrConfig)

	// A server no thread may use is not started.
	list, err := s.pool.Tools(ctx, s.mcp, func(string) bool { return false })
	require.NoError(t, err)
	require.Empty(t, list)
	require.Equal(t, 0, s.startCount(t))

	byID := s.tools(t)
	pid, err := strconv.Atoi(run(t, byID["mcp/h/pid"], s.env, `{}`).Output)
	require.NoError(t, err)
	require.NoError(t, s.pool.Close())
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "Close stopped the process")
	_, err = s.pool.Tools(ctx, s.mcp, nil)
	require.ErrorIs(t, err, ErrClosed)
	res := run(t, byID["mcp/h/echo"], s.env, `{"message":"late"}`)
	require.True(t, res.IsError, "a call after Close is refused: %s", res.Output)
}

func TestIdleServerIsClosed(t *testing.T) {
	t.Parallel()
	s := newSetup(t, time.Second)
	// Long enough that a loaded machine does not reap the server between
	// two statements of this test.
	s.pool.cfg.IdleTimeout = time.Second
	byID := s.tools(t)
	pid, err := strconv.Atoi(run(t, byID["mcp/h/pid"], s.env, `{}`).Output)
	require.NoError(t, err)
	time.Sleep(1300 * time.Millisecond)
	// Listing another project's servers reaps the idle one.
	_, err = s.pool.Tools(context.Background(), &config.MCP{}, nil)
	require.NoError(t, err)
	require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH)
	require.Equal(t, "echo: back", run(t, s.tools(t)["mcp/h/echo"], s.env, `{"message":"back"}`).Output)
	require.Equal(t, 2, s.startCount(t))

	// A tool listed before its server was closed for idleness (a long
	// model call in between) starts it again instead of failing.
	time.Sleep(1300 * time.Millisecond)
	_, err = s.pool.Tools(context.Background(), &config.MCP{}, nil)
	require.NoError(t, err)
	require.Equal(t, "echo: late", run(t, byID["mcp/h/echo"], s.env, `{"message":"late"}`).Output)
	require.Equal(t, 3, s.startCount(t))
}

func TestStreamableHTTPWithHeaders(t *testing.T) {
	t.Parallel()
	srv := mcp.NewServer(&mcp.Implementation{Name: "remote", Version: "1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "whoami"}, func(_ context.Context, req *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		return text("auth: " + req.Extra.Header.Get("Authorization")), nil, nil
	})
	var mu sync.Mutex
	var seen []string
	var handler atomic.Pointer[mcp.StreamableHTTPHandler]
	handler.Store(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		handler.Load().ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	t.Cleanup(func() {
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	})
	pool, err := New(Config{LookupEnv: func(k string) (string, bool) {
		if k == "REMOTE_TOKEN" {
			return "tok-1", true
		}
		return "", false
	}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pool.Close() })
	m := &config.MCP{Servers: map[string]config.MCPServer{"r": {URL: hs.URL, Headers: map[string]string{"Authorization": "Bearer ${REMOTE_TOKEN}"}, Timeout: 5 * time.Second}}}
	list, err := pool.Tools(context.Background(), m, nil)
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, "mcp/r/whoami", list[0].Def().Name)
	res := run(t, list[0], nil, `{}`)
	require.Equal(t, "auth: Bearer tok-1", res.Output)
	mu.Lock()
	require.NotEmpty(t, seen)
	for _, a := range seen {
		require.Equal(t, "Bearer tok-1", a, "every request carries the header")
	}
	mu.Unlock()

	// The server restarts and forgets its sessions: the next call, which
	// it refuses unrun, runs on a new session.
	handler.Store(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	res = run(t, list[0], nil, `{}`)
	require.Equal(t, "auth: Bearer tok-1", res.Output)
	require.Equal(t, 2, pool.Starts("r"))
}

// TestNewRefusesABadPassEnv: a name that cannot be a variable's is a
// configuration error, not a server started without it.
func TestNewRefusesABadPassEnv(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"", "A=B"} {
		_, err := New(Config{PassEnv: []string{"PATH", k}})
		require.ErrorContains(t, err, "PassEnv", k)
	}
}
