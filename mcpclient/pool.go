package mcpclient

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
)

// ErrConfig marks a server configuration no retry can mend: a command not
// on the worker's PATH, a ${VAR} the worker's environment lacks or
// refuses. The worker ends the thread (tool_error) instead of retrying.
var ErrConfig = errors.New("bad MCP server configuration")

// ErrClosed is returned once the pool is closed.
var ErrClosed = errors.New("mcp: the worker's server pool is closed")

// Config configures a Pool. The zero value gives the defaults.
type Config struct {
	// ConnectTimeout bounds starting (or reaching) a server, the MCP
	// handshake and listing its tools. Default 60s: `npx -y` may download
	// the server first.
	ConnectTimeout time.Duration
	// IdleTimeout closes a server no thread has used for this long (it is
	// started again when one does). Default 15m; negative: never.
	IdleTimeout time.Duration
	// PassEnv names the variables copied from the worker's environment
	// into a stdio server's. Default the external tools' list (PATH, HOME,
	// USER, the locale, TZ, SSL_CERT_*); tools.IsCredential names are
	// never copied, whatever this says.
	PassEnv []string
	// LookupEnv reads the worker's environment, for PassEnv and ${VAR}.
	// Default os.LookupEnv.
	LookupEnv func(string) (string, bool)
	// HTTPClient reaches streamable HTTP servers; headers from mcp.yaml
	// are added to each of its requests. Default a client without a
	// timeout (a call's context bounds each request).
	HTTPClient *http.Client
	// TerminateGrace is how long a stdio server has to exit after its
	// stdin is closed, and then after SIGTERM, before SIGKILL. Default 2s.
	TerminateGrace time.Duration
	// Logger receives a line per server start, exit and failure. Default
	// discards.
	Logger *slog.Logger
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 60 * time.Second
	}
	if c.IdleTimeout == 0 {
		c.IdleTimeout = 15 * time.Minute
	}
	if c.PassEnv == nil {
		c.PassEnv = tools.ExternalConfig{}.WithDefaults().PassEnv
	}
	if c.LookupEnv == nil {
		c.LookupEnv = os.LookupEnv
	}
	if c.HTTPClient == nil {
		c.HTTPClient = &http.Client{}
	}
	if c.TerminateGrace <= 0 {
		c.TerminateGrace = 2 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// validate names the first bad field of c (after WithDefaults).
func (c Config) validate() error {
	for _, k := range c.PassEnv {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("mcpclient config: PassEnv %q: not a variable name", k)
		}
	}
	return nil
}

// Pool holds a worker's MCP servers, each connected once and shared by
// every thread that uses it. It is safe for concurrent use.
type Pool struct {
	cfg Config

	mu      sync.Mutex
	servers map[string]*server // key (serverKey) → server
	closed  bool
}

// New returns an empty pool; servers connect when a thread first lists
// their tools.
func New(cfg Config) (*Pool, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Pool{cfg: cfg, servers: map[string]*server{}}, nil
}

// Tools returns the tools of the servers of m that may allows (nil: all),
// as mcp/<server>/<tool>, connecting each server this worker has not
// connected yet. A tool whose name cannot be a tool id (it holds a
// character other than letters, digits, '_' and '-') is left out and
// logged. An error wrapping ErrConfig cannot be mended by a retry;
// another error (a server that does not start, or does not answer) may.
func (p *Pool) Tools(ctx context.Context, m *config.MCP, may func(server string) bool) ([]tools.Tool, error) {
	var out []tools.Tool
	for _, name := range m.Names() {
		if may != nil && !may(name) {
			continue
		}
		decl := m.Servers[name]
		spec, err := decl.Expand(p.lookup)
		if err != nil {
			return nil, fmt.Errorf("mcp server %s: %w: mcp.yaml: servers.%s: %w", name, ErrConfig, name, err)
		}
		srv, err := p.server(name, spec)
		if err != nil {
			return nil, err
		}
		list, err := srv.toolList(ctx)
		if err != nil {
			return nil, fmt.Errorf("mcp server %s: %w", name, err)
		}
		srv.touch() // used now: a slow start is no idleness (reapIdle below)
		for _, t := range list {
			id := "mcp/" + name + "/" + t.Name
			if err := tools.ValidateID(id); err != nil {
				p.cfg.Logger.Warn("mcp tool left out: its name cannot be a tool id", "server", name, "tool", t.Name, "error", err)
				continue
			}
			schema, err := json.Marshal(t.InputSchema)
			if err != nil || t.InputSchema == nil {
				schema = json.RawMessage(`{"type":"object"}`)
			}
			desc := t.Description
			if desc == "" {
				desc = t.Title
			}
			out = append(out, &tool{srv: srv, name: t.Name, timeout: decl.Timeout,
				def: thread.ToolDef{Name: id, Description: desc, InputSchema: schema}})
		}
	}
	p.reapIdle()
	return out, nil
}

// workerOwn names the variables a project's mcp.yaml may not expand: the
// worker's own settings and credentials.
func workerOwn(name string) bool {
	for _, p := range []string{"SPOOL_", "AWS_", "ANTHROPIC_", "OPENAI_"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// lookup expands one ${VAR} of mcp.yaml.
func (p *Pool) lookup(name string) (string, error) {
	if workerOwn(name) {
		return "", errors.New("a worker's own settings and keys (SPOOL_*, AWS_*, ANTHROPIC_*, OPENAI_*) are never given to MCP servers")
	}
	v, ok := p.cfg.LookupEnv(name)
	if !ok {
		return "", errors.New("not set in the worker's environment")
	}
	return v, nil
}

// serverKey identifies a server by its name and what it connects to: the
// expanded command, env, url and headers (not the call timeout, which is
// each project's own).
func serverKey(name string, spec config.MCPServer) string {
	b, _ := json.Marshal([]any{spec.Command, spec.Env, spec.URL, spec.Headers})
	sum := sha256.Sum256(b)
	return name + "/" + hex.EncodeToString(sum[:12])
}

// server returns the pool's server for (name, spec), making it if new.
func (p *Pool) server(name string, spec config.MCPServer) (*server, error) {
	key := serverKey(name, spec)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	s := p.servers[key]
	if s == nil {
		s = newServer(p, name, spec)
		p.servers[key] = s
	}
	s.touch()
	return s, nil
}

// reapIdle closes the servers no call or listing used for IdleTimeout.
func (p *Pool) reapIdle() {
	if p.cfg.IdleTimeout < 0 {
		return
	}
	var idle []*server
	p.mu.Lock()
	for k, s := range p.servers {
		if s.idleFor() > p.cfg.IdleTimeout {
			delete(p.servers, k)
			idle = append(idle, s)
		}
	}
	p.mu.Unlock()
	for _, s := range idle {
		p.cfg.Logger.Info("mcp server idle: closing it", "server", s.name)
		s.close()
	}
}

// Close stops every server: stdio servers get their stdin closed, then
// SIGTERM, then SIGKILL to their process group (TerminateGrace apart);
// HTTP sessions are ended. Call it once the activations that use the
// pool have ended.
func (p *Pool) Close() error {
	p.mu.Lock()
	p.closed = true
	servers := p.servers
	p.servers = map[string]*server{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	for _, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.close()
		}()
	}
	wg.Wait()
	return nil
}
