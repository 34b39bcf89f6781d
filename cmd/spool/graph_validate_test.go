package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

const toolTypoGraph = `version: "1.0.0"
description: a graph with tools right and wrong
permissions: ["rye.execute.tool.*", "rye.execute.graph.*"]
config:
  start: write
  nodes:
    write:
      action: {tool: rye/file-system/fs_wrte, params: {path: x, content: y}}
      next: lookup
    lookup:
      action: {tool: mcp/files/read_file, params: {path: x}}
      next: elsewhere
    elsewhere:
      action: {tool: mcp/nowhere/read_file, params: {path: x}}
      next: hello
    hello:
      action: {tool: acme/hello}
      next: nested
    nested:
      action: {tool: g/other}
      next: computed
    computed:
      action: {tool: "${state.tool}"}
      next: done
    done:
      type: return
`

// TestGraphValidateWarnsOfUnknownTools: graph validate warns of a tool
// action naming no built-in tool, project tool, graph or tool of a
// configured MCP server, suggests the near name, and passes the rest.
func TestGraphValidateWarnsOfUnknownTools(t *testing.T) {
	// Not parallel: urfave/cli apps share package state (its help command).
	dir := t.TempDir()
	files := map[string]string{
		".ai/graphs/g/typo.yaml":  toolTypoGraph,
		".ai/graphs/g/other.yaml": "version: \"1\"\ndescription: d\npermissions: [\"rye.execute.tool.*\"]\nconfig:\n  start: r\n  nodes:\n    r: {type: return}\n",
		".ai/tools/acme/hello.sh": "#!/bin/sh\necho '{}'\n",
		".ai/config/mcp.yaml":     "servers:\n  files:\n    command: [\"mcp-files\"]\n",
	}
	for p, body := range files {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, p), []byte(body), 0o755))
	}
	for _, arg := range []string{"g/typo", filepath.Join(dir, ".ai/graphs/g/typo.yaml")} {
		var out, errb bytes.Buffer
		app := newApp(&out, &errb)
		err := app.RunContext(context.Background(), reorderArgs(app, []string{"spool", "--project", dir, "graph", "validate", arg}))
		require.NoError(t, err, "warnings do not fail validation")
		got := out.String()
		require.Contains(t, got, arg+": ok\n")
		require.Contains(t, got, `node write: action.tool: tool "rye/file-system/fs_wrte" is neither built in, a project tool, a graph nor a tool of a configured MCP server (the step would fail tool_error) (did you mean "rye/file-system/fs_write"?)`)
		require.Contains(t, got, `node elsewhere: action.tool: tool "mcp/nowhere/read_file" is neither`)
		for _, ok := range []string{"node lookup:", "node hello:", "node nested:", "node computed: action.tool: tool"} {
			require.NotContains(t, got, ok, "a known or computed tool is not warned of")
		}
	}
}
