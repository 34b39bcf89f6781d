package graph

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const testHeader = `version: "1"
description: test graph
permissions: ["rye.execute.tool.*", "rye.execute.directive.*", "rye.execute.graph.*"]
`

// withNodes is a graph file whose config is start: a and the given nodes
// (written at column 0).
func withNodes(nodes string) string {
	return testHeader + "config:\n  start: a\n  nodes:\n" + indent(nodes, 4)
}

func indent(s string, n int) string {
	pad := strings.Repeat(" ", n)
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		if l != "" {
			lines[i] = pad + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}

// mustParse parses src and requires no error and no error diagnostics.
func mustParse(t *testing.T, src string) *Graph {
	t.Helper()
	g, r, err := Parse("test", []byte(src))
	require.NoError(t, err)
	require.Empty(t, r.Errors, "errors: %v", r.Errors)
	return g
}

// has reports whether ds holds a diagnostic at node/key whose message
// contains msg.
func has(ds []Diagnostic, node, key, msg string) bool {
	for _, d := range ds {
		if d.Node == node && d.Key == key && strings.Contains(d.Message, msg) {
			return true
		}
	}
	return false
}
