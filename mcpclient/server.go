package mcpclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os/exec"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/tools"
)

// server is one MCP server of the pool: its configuration and, while it
// runs, its connection. A connection that is lost (the process exited,
// the HTTP session ended) is dropped, and the next call or listing makes
// a new one.
type server struct {
	pool *Pool
	name string
	spec config.MCPServer // expanded

	// connecting is held while a connection is made, so that concurrent
	// callers wait for one connection instead of starting several.
	connecting chan struct{}

	mu       sync.Mutex
	conn     *conn
	tools    []*mcp.Tool // the last listing
	listed   bool
	stale    bool // the server said its list changed since
	closed   bool
	starts   int
	inflight int
	lastUsed time.Time
}

// conn is one connection (for a stdio server, one process).
type conn struct {
	sess   *mcp.ClientSession
	cmd    *exec.Cmd // stdio only
	stderr *tailBuffer
	// closing is set when the pool closes the connection itself, so its
	// end is not reported as a crash.
	closing bool
}

func newServer(p *Pool, name string, spec config.MCPServer) *server {
	return &server{pool: p, name: name, spec: spec, connecting: make(chan struct{}, 1), lastUsed: time.Now()}
}

func (s *server) touch() {
	s.mu.Lock()
	s.lastUsed = time.Now()
	s.mu.Unlock()
}

// live is the server to call in s's place: s, or when the pool closed s
// for idleness after a thread listed its tools, the pool's server for the
// same name and spec (made again, and started on its first call). A
// closed pool answers the call with ErrClosed, as s does.
func (s *server) live() *server {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if !closed {
		return s
	}
	if n, err := s.pool.server(s.name, s.spec); err == nil {
		return n
	}
	return s
}

// idleFor is how long the server has gone unused; 0 while a call runs.
func (s *server) idleFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inflight > 0 {
		return 0
	}
	return time.Since(s.lastUsed)
}

// toolList returns the server's tools: the last listing while it holds,
// else a fresh one (connecting first when needed). A server that died
// since it was listed is not restarted for its list: its next call does
// that.
func (s *server) toolList(ctx context.Context) ([]*mcp.Tool, error) {
	s.mu.Lock()
	if s.listed && !s.stale {
		list := s.tools
		s.mu.Unlock()
		return list, nil
	}
	s.mu.Unlock()
	c, err := s.session(ctx)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	stale := s.stale || !s.listed
	s.mu.Unlock()
	if stale {
		if err := s.list(ctx, c); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tools, nil
}

// list reads the server's tools over c.
func (s *server) list(ctx context.Context, c *conn) error {
	lctx, cancel := context.WithTimeout(ctx, s.pool.cfg.ConnectTimeout)
	defer cancel()
	var list []*mcp.Tool
	for t, err := range c.sess.Tools(lctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		list = append(list, t)
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	s.mu.Lock()
	s.tools, s.listed, s.stale = list, true, false
	s.mu.Unlock()
	return nil
}

// session returns the live connection, making one (and listing the
// server's tools) when there is none.
func (s *server) session(ctx context.Context) (*conn, error) {
	select {
	case s.connecting <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { <-s.connecting }()
	s.mu.Lock()
	c, closed := s.conn, s.closed
	s.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	if c != nil {
		return c, nil
	}
	return s.connect(ctx)
}

// version names spool to the servers it connects to.
var version = func() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "dev"
}()

// connect starts (or reaches) the server, does the MCP handshake and
// lists its tools, within ConnectTimeout.
func (s *server) connect(ctx context.Context) (*conn, error) {
	cfg := s.pool.cfg
	cctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	c := &conn{}
	var transport mcp.Transport
	if s.spec.Stdio() {
		cmd := exec.Command(s.spec.Command[0], s.spec.Command[1:]...)
		cmd.Env = s.environ()
		c.stderr = &tailBuffer{max: 4 << 10}
		cmd.Stderr = c.stderr
		// Its own process group, so that stopping it stops what it
		// started (npx starts node).
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		c.cmd = cmd
		transport = &mcp.CommandTransport{Command: cmd, TerminateDuration: cfg.TerminateGrace}
	} else {
		hc := *cfg.HTTPClient
		hc.Transport = headerTransport{base: hc.Transport, headers: s.spec.Headers}
		transport = &mcp.StreamableClientTransport{Endpoint: s.spec.URL, HTTPClient: &hc}
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "spool", Version: version}, &mcp.ClientOptions{
		// No roots, sampling or elicitation: spool answers none of them.
		Capabilities: &mcp.ClientCapabilities{},
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			s.mu.Lock()
			s.stale = true
			s.mu.Unlock()
		},
	})
	sess, err := client.Connect(cctx, transport, nil)
	if err != nil {
		s.reap(c)
		if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
			return nil, fmt.Errorf("%w: start %q: %w", ErrConfig, s.spec.Command[0], err)
		}
		return nil, fmt.Errorf("%s: %w%s", s.what(), err, c.stderrNote())
	}
	c.sess = sess
	if err := s.list(cctx, c); err != nil {
		c.closing = true
		_ = sess.Close()
		s.reap(c)
		return nil, fmt.Errorf("%s: %w%s", s.what(), err, c.stderrNote())
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.closing = true
		_ = sess.Close()
		s.reap(c)
		return nil, ErrClosed
	}
	s.conn = c
	s.starts++
	starts := s.starts
	ntools := len(s.tools)
	s.mu.Unlock()
	log := cfg.Logger.With("server", s.name)
	if c.cmd != nil {
		log = log.With("pid", c.cmd.Process.Pid)
	}
	log.Info("mcp server connected", "tools", ntools, "start", starts)
	go func() {
		_ = sess.Wait()
		s.lost(c)
	}()
	return c, nil
}

// what says how the server is reached, for errors.
func (s *server) what() string {
	if s.spec.Stdio() {
		return fmt.Sprintf("start %q", strings.Join(s.spec.Command, " "))
	}
	return "connect to " + s.spec.URL
}

// lost forgets a connection that ended: the next use connects again.
func (s *server) lost(c *conn) {
	s.mu.Lock()
	if s.conn == c {
		s.conn = nil
	}
	closing := c.closing
	s.mu.Unlock()
	if !closing {
		s.pool.cfg.Logger.Warn("mcp server connection ended; the next call starts it again", "server", s.name, "stderr", c.stderr.String())
	}
	_ = c.sess.Close()
	s.reap(c)
}

// drop ends connection c after a call failed on it (a transport error):
// the next use connects again.
func (s *server) drop(c *conn) {
	s.mu.Lock()
	if s.conn == c {
		s.conn = nil
	}
	s.mu.Unlock()
	go func() {
		_ = c.sess.Close()
		s.reap(c)
	}()
}

// reap kills what is left of a stdio connection's process group.
func (s *server) reap(c *conn) {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	if err := syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		s.pool.cfg.Logger.Warn("mcp server: kill its process group", "server", s.name, "error", err)
	}
}

// close ends the server for good (the pool is closing, or it was idle).
func (s *server) close() {
	s.mu.Lock()
	s.closed = true
	c := s.conn
	s.conn = nil
	if c != nil {
		c.closing = true
	}
	s.mu.Unlock()
	if c == nil {
		return
	}
	_ = c.sess.Close()
	s.reap(c)
}

// call runs one tool call. failure, when set, is the error the model
// reads; err is the caller's context ending (a cancel, an interrupt, the
// duration limit), for the worker to handle as for any tool.
func (s *server) call(ctx context.Context, name string, args any, timeout time.Duration) (res *mcp.CallToolResult, failure string, err error) {
	s.mu.Lock()
	s.inflight++
	s.lastUsed = time.Now()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.inflight--
		s.lastUsed = time.Now()
		s.mu.Unlock()
	}()
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var c *conn
	for attempt := 0; ; attempt++ {
		if c, err = s.session(ctx); err != nil {
			if ctx.Err() != nil {
				return nil, "", context.Cause(ctx)
			}
			return nil, fmt.Sprintf("MCP server %s is not available: %v", s.name, err), nil
		}
		res, err = c.sess.CallTool(cctx, &mcp.CallToolParams{Name: name, Arguments: args})
		// An HTTP server that forgot the session (it restarted) did not
		// run the call: a new session runs it, once.
		if attempt > 0 || !errors.Is(err, mcp.ErrSessionMissing) {
			break
		}
		s.pool.cfg.Logger.Info("mcp server lost the session; reconnecting", "server", s.name)
		s.drop(c)
	}
	var rpcErr *jsonrpc.Error
	switch {
	case err == nil:
		return res, "", nil
	case ctx.Err() != nil:
		return nil, "", context.Cause(ctx)
	case cctx.Err() != nil:
		return nil, fmt.Sprintf("MCP server %s did not answer within %s (the call was cancelled)", s.name, timeout), nil
	case errors.As(err, &rpcErr):
		return nil, fmt.Sprintf("MCP server %s refused the call: %s (code %d)", s.name, rpcErr.Message, rpcErr.Code), nil
	}
	// The transport failed: the process exited, or the HTTP session
	// ended. The call may have had effects, so it is not run again here.
	s.drop(c)
	if s.spec.Stdio() {
		return nil, fmt.Sprintf("MCP server %s exited during the call (%v); it is started again on the next call%s", s.name, err, c.stderrNote()), nil
	}
	return nil, fmt.Sprintf("MCP server %s failed during the call (%v); it is reconnected on the next call", s.name, err), nil
}

// environ is a stdio server's environment: PassEnv from the worker's,
// credentials excepted, then the server's env from mcp.yaml.
func (s *server) environ() []string {
	cfg := s.pool.cfg
	vars := map[string]string{}
	for _, k := range cfg.PassEnv {
		if v, ok := cfg.LookupEnv(k); ok && !tools.IsCredential(k) {
			vars[k] = v
		}
	}
	for k, v := range s.spec.Env {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

// stderrNote quotes the end of a stdio server's stderr, if it wrote any.
func (c *conn) stderrNote() string {
	if c.stderr == nil {
		return ""
	}
	if t := strings.TrimSpace(c.stderr.String()); t != "" {
		return "; its stderr ends: " + t
	}
	return ""
}

// headerTransport adds mcp.yaml's headers to every request.
type headerTransport struct {
	base    http.RoundTripper
	headers map[string]string
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	base := h.base
	if base == nil {
		base = http.DefaultTransport
	}
	if len(h.headers) == 0 {
		return base.RoundTrip(r)
	}
	r = r.Clone(r.Context())
	for k, v := range h.headers {
		r.Header.Set(k, v)
	}
	return base.RoundTrip(r)
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if t == nil {
		return ""
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Starts reports how many times the pool connected to server name (any
// configuration of it): a test sees a restart.
func (p *Pool) Starts(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, s := range p.servers {
		if s.name == name {
			s.mu.Lock()
			n += s.starts
			s.mu.Unlock()
		}
	}
	return n
}

var _ tools.Tool = (*tool)(nil)
