package config

import (
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestMCP(t *testing.T) {
	t.Parallel()
	m, err := ParseMCP("m.yaml", []byte(`servers:
  files:
    command: ["npx", "-y", "@modelcontextprotocol/server-filesystem", "/data"]
    env: {KEY: value, TOKEN: "${FILES_TOKEN}"}
  remote:
    url: http://127.0.0.1:9000/mcp
    headers: {Authorization: "Bearer ${REMOTE_TOKEN}"}
    timeout: 2m
  slow:
    command: [srv]
    timeout: 1.5
  templated:
    url: "${REMOTE_URL}/mcp"
`))
	require.NoError(t, err)
	require.Equal(t, []string{"files", "remote", "slow", "templated"}, m.Names())
	require.True(t, m.Servers["files"].Stdio())
	require.False(t, m.Servers["remote"].Stdio())
	require.Equal(t, DefaultMCPTimeout, m.Servers["files"].Timeout)
	require.Equal(t, 2*time.Minute, m.Servers["remote"].Timeout)
	require.Equal(t, 1500*time.Millisecond, m.Servers["slow"].Timeout)
	var none *MCP
	require.Empty(t, none.Names(), "no mcp.yaml declares nothing")

	requireRefused(t, ParseMCP, "m.yaml", map[string]string{
		"servers: {a: {}}": "command (stdio) or url (streamable HTTP) is required",
		"servers: {a: {command: [x], url: http://h/}}":             "both set",
		"servers: {a: {command: [\"\"]}}":                          "command[0] is empty",
		"servers: {a: {url: ftp://h/}}":                            "not an http(s) URL",
		"servers: {a: {url: http://h/, env: {A: b}}}":              "env is for command servers",
		"servers: {a: {command: [x], headers: {A: b}}}":            "headers are for url servers",
		"servers: {a.b: {command: [x]}}":                           "letters, digits, _ and -",
		"servers: {a: {command: [x], timeout: soon}}":              "not a duration",
		"servers: {a: {command: [x], timeout: -1}}":                "not positive",
		"servers: {a: {command: [x], wat: 1}}":                     "line 1: unknown key wat (expected command, env, url, headers or timeout)",
		"servers: {a: {command: [x], env: {A: [not, a, string]}}}": "cannot unmarshal",
	})

	// Either path is read; a bundle without the file declares nothing.
	p, err := Load(fstest.MapFS{".ai/config/mcp.yaml": {Data: []byte("servers: {s: {command: [x]}}\n")}})
	require.NoError(t, err)
	require.Equal(t, []string{"s"}, p.MCP.Names())
	got, err := LoadMCP(fstest.MapFS{".ai/config/agent/mcp.yaml": {Data: []byte("servers: {t: {url: https://h/mcp}}\n")}})
	require.NoError(t, err)
	require.Equal(t, []string{"t"}, got.Names())
	got, err = LoadMCP(fstest.MapFS{})
	require.NoError(t, err)
	require.Nil(t, got)
}

func TestMCPExpand(t *testing.T) {
	t.Parallel()
	env := map[string]string{"REMOTE_TOKEN": "s3cr3t", "HOST": "127.0.0.1:9"}
	lookup := func(name string) (string, error) {
		if name == "SPOOL_REDIS_URL" {
			return "", errors.New("refused")
		}
		v, ok := env[name]
		if !ok {
			return "", errors.New("not set")
		}
		return v, nil
	}
	s := MCPServer{URL: "http://${HOST}/mcp", Headers: map[string]string{"Authorization": "Bearer ${REMOTE_TOKEN}", "X": "$HOME ${}"}}
	got, err := s.Expand(lookup)
	require.NoError(t, err)
	require.Equal(t, "http://127.0.0.1:9/mcp", got.URL)
	require.Equal(t, map[string]string{"Authorization": "Bearer s3cr3t", "X": "$HOME ${}"}, got.Headers, "only ${NAME} is a reference")
	require.Equal(t, "Bearer ${REMOTE_TOKEN}", s.Headers["Authorization"], "the declared server is not changed")

	got, err = MCPServer{Command: []string{"srv", "${HOST}"}, Env: map[string]string{"T": "${REMOTE_TOKEN}"}}.Expand(lookup)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"T": "s3cr3t"}, got.Env)
	require.Equal(t, []string{"srv", "${HOST}"}, got.Command, "the command is not expanded")

	_, err = MCPServer{URL: "http://h/", Headers: map[string]string{"A": "${MISSING}"}}.Expand(lookup)
	require.ErrorContains(t, err, "headers.A: ${MISSING}: not set")
	_, err = MCPServer{Command: []string{"x"}, Env: map[string]string{"R": "${SPOOL_REDIS_URL}"}}.Expand(lookup)
	require.ErrorContains(t, err, "env.R: ${SPOOL_REDIS_URL}: refused")
	_, err = MCPServer{URL: "${HOST}"}.Expand(lookup)
	require.ErrorContains(t, err, "not an http(s) URL", "the expanded url is checked")
}
