package launch

import (
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/directive"
)

// Known holds the built-in tools, the worker's own, the project's and the
// MCP servers of its mcp.yaml, and the directives; what does not load is
// a problem, and the rest is known all the same.
func TestKnown(t *testing.T) {
	t.Parallel()
	files := fstest.MapFS{
		".ai/tools/acme/hello.sh":  {Data: []byte("#!/bin/sh\necho '{}'\n"), Mode: 0o755},
		".ai/config/mcp.yaml":      {Data: []byte("servers:\n  files:\n    command: [\"mcp-files\"]\n")},
		".ai/directives/demo/a.md": {Data: []byte("x")},
	}
	r := &directive.Resolver{Spaces: []directive.Space{directive.SpaceAt(directive.SpaceProject, files, ".")}}
	known, problems := Known(files, r)
	require.Empty(t, problems)
	for _, id := range []string{"rye/file-system/fs_write", "rye/file-system/fs_read", "rye/agent/threads/thread_directive", "acme/hello"} {
		require.Contains(t, known.Tools, id)
	}
	require.Equal(t, []string{"files"}, known.MCPServers)
	require.Equal(t, []string{"demo/a"}, known.Directives)

	files[".ai/tools/bad.yaml"] = &fstest.MapFile{Data: []byte("id: [\n")}
	known, problems = Known(files, r)
	require.Len(t, problems, 1)
	require.Contains(t, problems[0], "project tools: ")
	require.Contains(t, known.Tools, "rye/file-system/fs_write")
}

func TestGraphTools(t *testing.T) {
	t.Parallel()
	files := fstest.MapFS{
		".ai/tools/acme/hello.sh":    {Data: []byte("#!/bin/sh\necho '{}'\n"), Mode: 0o755},
		".ai/config/mcp.yaml":        {Data: []byte("servers:\n  files:\n    command: [\"mcp-files\"]\n")},
		".ai/graphs/g/nested.yaml":   {Data: []byte("config: {start: r, nodes: {r: {type: return}}}\n")},
		".ai/tools/graphs/kept.yaml": {Data: []byte("tool_type: graph\nconfig: {start: r, nodes: {r: {type: return}}}\n")},
	}
	known, names, problems := GraphTools(files)
	require.Empty(t, problems)
	for _, id := range []string{"rye/file-system/fs_write", "rye.file-system.fs_write", "rye__file-system__fs_write", "rye/bash",
		"rye/agent/threads/directive_return", "acme/hello", "mcp/files/read_file", "g/nested", "graphs/kept"} {
		require.True(t, known(id), id)
	}
	for _, id := range []string{"rye/file-system/fs_wrte", "mcp/other/read_file", "mcp/files/", "acme/bye", "g/missing"} {
		require.False(t, known(id), id)
	}
	require.Contains(t, names, "acme/hello")
}
