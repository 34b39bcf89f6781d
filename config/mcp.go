package config

import (
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/thread"
)

// mcpPaths are where a project declares its MCP servers (CLI.md "MCP"),
// the first found wins.
var mcpPaths = []string{".ai/config/mcp.yaml", ".ai/config/agent/mcp.yaml"}

// MCP is mcp.yaml: the MCP servers whose tools a thread may call, as
// mcp/<server>/<tool>, when it holds that tool's execute capability.
//
//	servers:
//	  files:                                   # stdio: started by the worker
//	    command: ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/data"]
//	    env: {KEY: value}                      # added to the server's environment
//	    timeout: 2m                            # a call's limit (default 60s)
//	  remote:                                  # streamable HTTP
//	    url: http://127.0.0.1:9000/mcp
//	    headers: {Authorization: "Bearer ${REMOTE_TOKEN}"}
//
// ${VAR} in url, headers and env values is expanded from the environment
// of the worker that connects (MCPServer.Expand), so a token need not be
// in the project's files. A server name is letters, digits, '_' and '-'.
type MCP struct {
	Servers map[string]MCPServer `yaml:"servers"`
}

// MCPServer is one server of mcp.yaml: Command (stdio) or URL (streamable
// HTTP), never both.
type MCPServer struct {
	// Command is the stdio server's argv; the first element is looked up
	// on the worker's PATH.
	Command []string `yaml:"command"`
	// Env is added to a stdio server's environment.
	Env map[string]string `yaml:"env"`
	// URL is the streamable HTTP endpoint (http or https).
	URL string `yaml:"url"`
	// Headers are sent with every HTTP request to URL.
	Headers map[string]string `yaml:"headers"`
	// Timeout is a call's time limit: a call still running then is
	// answered with an error the model reads. Default DefaultMCPTimeout.
	Timeout time.Duration `yaml:"-"`
	RawTime any           `yaml:"timeout"`
}

// DefaultMCPTimeout is a call's time limit when mcp.yaml sets none.
const DefaultMCPTimeout = 60 * time.Second

// Stdio reports whether the server is started as a process (else it is
// reached over HTTP).
func (s MCPServer) Stdio() bool { return len(s.Command) > 0 }

// Names returns the server names, sorted. A nil MCP has none.
func (m *MCP) Names() []string {
	if m == nil {
		return nil
	}
	names := make([]string, 0, len(m.Servers))
	for n := range m.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// LoadMCP reads mcp.yaml from the project fsys; a missing file declares no
// server (nil).
func LoadMCP(fsys fs.FS) (*MCP, error) {
	return load(fsys, nil, ParseMCP, mcpPaths...)
}

var serverName = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ParseMCP parses mcp.yaml; an unknown key, a bad server name, a server
// with neither or both of command and url, a url that is not http(s), env
// on an HTTP server, headers on a stdio one, or a bad timeout is an error
// naming the file and server.
func ParseMCP(p string, data []byte) (*MCP, error) {
	var m MCP
	if err := decodeStrict(p, data, &m); err != nil {
		return nil, err
	}
	for _, name := range m.Names() {
		s := m.Servers[name]
		where := fmt.Sprintf("%s: servers.%s", p, name)
		if !serverName.MatchString(name) {
			return nil, fmt.Errorf("%s: the name must be letters, digits, _ and - (it is a segment of the tool ids mcp/%s/<tool>)", where, name)
		}
		if err := checkTransport(s); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		d, err := parseTimeout(s.RawTime)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		s.Timeout = d
		m.Servers[name] = s
	}
	return &m, nil
}

// checkTransport checks that s is either a stdio server (a command, and
// env) or a streamable HTTP one (an http(s) url, and headers), with none
// of the other's settings. A url holding ${VAR} is checked once expanded
// (Expand).
func checkTransport(s MCPServer) error {
	switch {
	case s.Stdio() && s.URL != "":
		return errors.New("command and url both set: a server is stdio (command) or streamable HTTP (url)")
	case !s.Stdio() && s.URL == "":
		return errors.New("command (stdio) or url (streamable HTTP) is required")
	case s.Stdio() && strings.TrimSpace(s.Command[0]) == "":
		return errors.New("command[0] is empty")
	case s.Stdio() && len(s.Headers) > 0:
		return errors.New("headers are for url servers; a stdio server takes env")
	case !s.Stdio() && len(s.Env) > 0:
		return errors.New("env is for command servers; a url server takes headers")
	}
	if !s.Stdio() && !strings.Contains(s.URL, "${") {
		return checkHTTPURL(s.URL)
	}
	return nil
}

func checkHTTPURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("url %q is not an http(s) URL", raw)
	}
	return nil
}

// parseTimeout reads a timeout given as seconds (30, 1.5) or a duration
// ("90s"); nil is the default.
func parseTimeout(v any) (time.Duration, error) {
	if v == nil {
		return DefaultMCPTimeout, nil
	}
	var d time.Duration
	switch t := v.(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(t); err != nil {
			f, ferr := strconv.ParseFloat(t, 64)
			if ferr != nil {
				return 0, fmt.Errorf("timeout %q is not a duration (90s) or a number of seconds", t)
			}
			d = time.Duration(f * float64(time.Second))
		}
	default:
		f, err := thread.Number(v)
		if err != nil {
			return 0, fmt.Errorf("timeout: %w", err)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return 0, fmt.Errorf("timeout %v is not positive", v)
	}
	return d, nil
}

var varRef = regexp.MustCompile(`\$\{([A-Za-z_][A-Za-z0-9_]*)\}`)

// Expand returns s with every ${VAR} in its url, header values and env
// values replaced by lookup(VAR). A variable lookup does not find (unset,
// or one it refuses) is an error naming it and where it is used.
func (s MCPServer) Expand(lookup func(name string) (string, error)) (MCPServer, error) {
	expand := func(where, v string) (string, error) {
		var firstErr error
		out := varRef.ReplaceAllStringFunc(v, func(ref string) string {
			name := varRef.FindStringSubmatch(ref)[1]
			val, err := lookup(name)
			if err != nil && firstErr == nil {
				firstErr = fmt.Errorf("%s: ${%s}: %w", where, name, err)
			}
			return val
		})
		return out, firstErr
	}
	out := s
	var err error
	if out.URL, err = expand("url", s.URL); err != nil {
		return MCPServer{}, err
	}
	if s.URL != "" {
		if err := checkHTTPURL(out.URL); err != nil {
			return MCPServer{}, err
		}
	}
	expandMap := func(kind string, m map[string]string) (map[string]string, error) {
		if m == nil {
			return nil, nil
		}
		res := make(map[string]string, len(m))
		for k, v := range m {
			x, err := expand(kind+"."+k, v)
			if err != nil {
				return nil, err
			}
			res[k] = x
		}
		return res, nil
	}
	if out.Headers, err = expandMap("headers", s.Headers); err != nil {
		return MCPServer{}, err
	}
	if out.Env, err = expandMap("env", s.Env); err != nil {
		return MCPServer{}, err
	}
	out.Command = append([]string(nil), s.Command...)
	return out, nil
}
