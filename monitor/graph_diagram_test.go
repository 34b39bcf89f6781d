package monitor

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/graph"
)

const loopGraph = `version: "1.0.0"
description: a loop, an error route and a foreach
permissions: ["*"]
config:
  start: a
  nodes:
    a:
      action: {tool: t/x}
      on_error: fix
      next: b
    b:
      type: gate
      next:
        - when: {path: state.n, op: lt, value: 3}
          to: a
        - to: c
    fix:
      type: gate
      next: c
    c:
      type: return
`

// TestDiagramLayout: the loop's way back is the one edge drawn around,
// nodes sit in layers by their longest forward distance from the start,
// the edges a run took are marked with how often, and the run's names
// are escaped.
func TestDiagramLayout(t *testing.T) {
	g, rep, err := graph.Parse("t/loop", []byte(loopGraph))
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	steps := []graph.StepRecord{
		{Step: 1, Node: "a", Status: "ok", NextNode: "b", RoutedBy: "next"},
		{Step: 2, Node: "b", Status: "ok", NextNode: "a", RoutedBy: "next"},
		{Step: 3, Node: "a", Status: "ok", NextNode: "b", RoutedBy: "next"},
		{Step: 4, Node: "b", Status: "ok", NextNode: "a", RoutedBy: "next"},
		{Step: 5, Node: "a", Status: "error", NextNode: "fix", RoutedBy: "on_error"},
	}
	edges := diagramEdges(g, steps)
	nodes, layers := layout(g, edges, nil)
	back := 0
	for _, e := range edges {
		if e.back {
			back++
			require.Equal(t, "b", e.from)
			require.Equal(t, "a", e.to)
			require.Equal(t, 2, e.taken)
		}
		if e.from == "a" && e.to == "b" {
			require.Equal(t, 2, e.taken)
		}
		if e.kind == "error" {
			require.Equal(t, 1, e.taken)
		}
		if e.from == "b" && e.to == "c" {
			require.Zero(t, e.taken)
		}
	}
	require.Equal(t, 1, back, "one edge closes the loop")
	require.Equal(t, 0, nodes["a"].layer)
	require.Equal(t, 1, nodes["b"].layer)
	require.Equal(t, 1, nodes["fix"].layer)
	require.Equal(t, 2, nodes["c"].layer)
	require.Len(t, layers, 3)

	rows := graph.Nodes(g, steps, "fix", graph.NodeRunning, "running")
	svg := string(renderDiagram(g, rows, steps, "fix"))
	require.Contains(t, svg, `class="gnode n-running current" data-node="fix"`)
	require.Contains(t, svg, `class="gnode n-error visited routed" data-node="a"`)
	require.Contains(t, svg, `<title>b → a (state.n &lt; 3), taken 2 times</title>`)
	require.Equal(t, 1, strings.Count(svg, `class="edge e-next taken back"`))
	require.Contains(t, svg, `state.n &lt; 3 ×2`, "the loop's condition, escaped, and how often it was taken")
	require.Contains(t, svg, `<text x="`)
	require.NotContains(t, svg, "<script")
}
