package config

import (
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestApprovals(t *testing.T) {
	t.Parallel()
	a, err := ParseApprovals("a.yaml", []byte(`approvals:
  - tool: rye/file-system/fs_write
    timeout: 30m
  - tool: "rye/agent/threads/*"
    on_timeout: approve
notify: {url: "https://hooks.test/x", secret: "s", links: "https://spool.test"}
`))
	require.NoError(t, err)
	require.Len(t, a.Rules, 2)
	require.Equal(t, 30*time.Minute, a.Rules[0].Timeout)
	require.Equal(t, OnTimeoutDeny, a.Rules[0].OnTimeout, "deny by default")
	require.Equal(t, &a.Rules[0], a.Match("rye/file-system/fs_write"))
	require.Equal(t, &a.Rules[0], a.Match("rye.file-system.fs_write"), "either spelling")
	require.Equal(t, &a.Rules[1], a.Match("rye/agent/threads/thread_directive"))
	require.Nil(t, a.Match("rye/file-system/fs_read"))

	// `*` crosses `/`: a rule over a server's or a namespace's tools gates
	// every tool below it (path.Match's `*` would have gated none).
	m, err := ParseApprovals("m.yaml", []byte("approvals: [{tool: \"mcp/*\"}, {tool: \"rye/file-system/fs_?rite\"}]\n"))
	require.NoError(t, err)
	require.Equal(t, &m.Rules[0], m.Match("mcp/files/write"))
	require.Equal(t, &m.Rules[0], m.Match("mcp.files.write"))
	require.Equal(t, &m.Rules[1], m.Match("rye/file-system/fs_write"))
	require.Nil(t, m.Match("rye/file-system/fs_read"))
	require.Nil(t, m.Match("rye/mcp/x"), "anchored at the start")
	all, err := ParseApprovals("all.yaml", []byte("approvals: [{tool: \"*\"}]\n"))
	require.NoError(t, err)
	require.NotNil(t, all.Match("rye/agent/threads/thread_directive"))
	var none *Approvals
	require.Nil(t, none.Match("x"), "no approvals.yaml gates nothing")

	requireRefused(t, ParseApprovals, "a.yaml", map[string]string{
		"approvals: [{timeout: 1h}]":                "tool is required",
		"approvals: [{tool: \"[\"}]":                "tool \"[\"",
		"approvals: [{tool: x, timeout: soon}]":     "not a positive duration",
		"approvals: [{tool: x, on_timeout: maybe}]": "not deny or approve",
		"approvals: [{tool: x, wat: 1}]":            "line 1: unknown key wat (expected tool, timeout or on_timeout)",
		"notify: {url: ftp://x, secret: s}":         "not an http(s) URL",
		"notify: {url: https://x}":                  "notify.secret is required",
	})
	p, err := Load(fstest.MapFS{approvalsPath: {Data: []byte("approvals: [{tool: t/x}]\n")}})
	require.NoError(t, err)
	require.NotNil(t, p.Approvals.Match("t/x"))
}
