package monitor

import (
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/hooks"
)

// The layout's geometric promises, checked on what renderDiagram draws:
// no edge passes through a node or a label (not even its own nodes: it
// touches them only at its two ends, on their border), no two nodes or
// labels overlap, no label covers a node, and everything is inside the
// drawing. They are checked on every graph file of examples/ and of the
// repository's testdata, each as if a run had taken every edge twice and
// retried its start, and on random graphs with long edges, loops, self
// loops and parallel edges.

// eps is how far inside a box a path must come to count as crossing it.
const eps = 0.5

// repoGraphs are the graph files of examples/ and every testdata
// directory of the repository, parsed.
func repoGraphs(t *testing.T) map[string]*graph.Graph {
	t.Helper()
	out := map[string]*graph.Graph{}
	root := ".."
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "node_modules" || d.Name() == ".git") {
			return filepath.SkipDir
		}
		rel := filepath.ToSlash(strings.TrimPrefix(p, root+string(filepath.Separator)))
		if d.IsDir() || !strings.HasSuffix(p, ".yaml") || !strings.HasPrefix(rel, "examples/") && !strings.Contains(rel, "/testdata/") {
			return nil
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		g, rep, err := graph.Parse(strings.TrimSuffix(filepath.Base(p), ".yaml"), data)
		if err == nil && len(rep.Errors) == 0 && len(g.Nodes) > 0 {
			out[rel] = g
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// everyEdgeTwice is a run that took each edge of g's file twice and
// retried its start: every label carries a count, and the start a self
// loop.
func everyEdgeTwice(g *graph.Graph) []graph.StepRecord {
	var steps []graph.StepRecord
	for _, e := range fileEdges(g) {
		by := "next"
		if e.kind == "error" {
			by = "on_error"
		}
		for range 2 {
			steps = append(steps, graph.StepRecord{Step: len(steps) + 1, Node: e.from, NextNode: e.to, RoutedBy: by})
		}
	}
	return append(steps, graph.StepRecord{Step: len(steps) + 1, Node: g.Start, NextNode: g.Start, RoutedBy: "retry"})
}

// TestDiagramGeometryRepoGraphs: the graphs of examples/ and testdata
// (the reference graphs among them) are drawn without an edge through a
// node and without overlaps.
func TestDiagramGeometryRepoGraphs(t *testing.T) {
	t.Parallel()
	graphs := repoGraphs(t)
	require.GreaterOrEqual(t, len(graphs), 7, "examples/ and the graph package's testdata hold graphs")
	g, rep, err := graph.Parse("t/loop", []byte(loopGraph))
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	graphs["monitor/loopGraph"] = g
	for name, g := range graphs {
		t.Run(name, func(t *testing.T) {
			checkGeometry(t, g, nil)
			checkGeometry(t, g, everyEdgeTwice(g))
		})
	}
}

// TestDiagramSkippedNode: the graph: decide's conditional edge to
// probe skips degraded, and is drawn in a lane of its own, beside
// degraded, not through it.
func TestDiagramSkippedNode(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile(filepath.Join("testdata", "graphs", "skip.yaml"))
	require.NoError(t, err)
	g, rep, err := graph.Parse("g/skip", data)
	require.NoError(t, err)
	require.NoError(t, rep.Err())
	steps := []graph.StepRecord{{Step: 1, Node: "check", NextNode: "decide", RoutedBy: "next"}, {Step: 2, Node: "decide", NextNode: "probe", RoutedBy: "next"}}
	l := checkGeometry(t, g, steps)
	var skip *drawnEdge
	for _, d := range l.drawn() {
		if d.e.from == "decide" && d.e.to == "probe" {
			skip = &d
		}
	}
	require.NotNil(t, skip)
	degraded := nodeBox(l, "degraded")
	lane := math.Inf(1)
	for _, q := range polyline(skip.path) {
		if q.y >= degraded.y && q.y <= degraded.y+degraded.h {
			lane = q.x
			require.True(t, q.x < degraded.x || q.x > degraded.x+degraded.w, "the skipping edge passes degraded's layer beside it, at x=%v", q.x)
		}
	}
	require.False(t, math.IsInf(lane, 1), "the skipping edge passes degraded's layer")
}

// TestDiagramGeometryRandom: random graphs (long edges, loops, self
// loops, parallel edges, error routes, long names and labels, runs that
// took some of them) keep the layout's promises.
func TestDiagramGeometryRandom(t *testing.T) {
	t.Parallel()
	n := 300
	if testing.Short() {
		n = 60
	}
	for seed := range uint64(n) {
		g, steps := randomGraph(seed, 2+int(seed%17))
		t.Run(fmt.Sprint(seed), func(t *testing.T) { checkGeometry(t, g, steps) })
		if t.Failed() {
			return
		}
	}
}

// FuzzDiagramGeometry: the layout keeps its promises on any random graph.
func FuzzDiagramGeometry(f *testing.F) {
	for _, s := range []uint64{1, 7, 42, 1234} {
		f.Add(s, uint8(12))
	}
	f.Fuzz(func(t *testing.T, seed uint64, size uint8) {
		g, steps := randomGraph(seed, 1+int(size%24))
		checkGeometry(t, g, steps)
	})
}

// randomGraph is a graph of n nodes from seed: each node's next edges go
// mostly down the file's order, some far (skipping nodes), some back up
// (loops) and some to the node itself, conditioned with labels of any
// length; some nodes have an error route; a run took some edges, retried
// some nodes and routed others where the file does not go.
func randomGraph(seed uint64, n int) (*graph.Graph, []graph.StepRecord) {
	rnd := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	g := &graph.Graph{Name: fmt.Sprintf("r/%d", seed), Nodes: map[string]*graph.Node{}}
	for i := range n {
		name := fmt.Sprintf("n%d%s", i, strings.Repeat("x", rnd.IntN(3)*rnd.IntN(12)))
		kind := []string{graph.KindAction, graph.KindGate, graph.KindForeach, graph.KindReturn}[rnd.IntN(4)]
		g.Order = append(g.Order, name)
		g.Nodes[name] = &graph.Node{Name: name, Kind: kind}
	}
	g.Start = g.Order[0]
	target := func(i int) string {
		switch p := rnd.IntN(10); {
		case p < 5 && i+1 < n:
			return g.Order[i+1+rnd.IntN(min(3, n-i-1))]
		case p < 7:
			return g.Order[rnd.IntN(n)] // anywhere: far down, back up, itself
		case p < 8:
			return g.Order[i]
		}
		return g.Order[n-1]
	}
	for i, name := range g.Order {
		node := g.Nodes[name]
		edges := rnd.IntN(4)
		for k := range edges {
			var when *hooks.Condition
			if k < edges-1 || rnd.IntN(3) == 0 {
				when = &hooks.Condition{Path: "state." + strings.Repeat("v", 1+rnd.IntN(30)), Op: "eq", Value: rnd.IntN(100)}
			}
			node.Next = append(node.Next, graph.Edge{When: when, To: target(i)})
		}
		if rnd.IntN(4) == 0 {
			node.OnError = target(i)
		}
	}
	var steps []graph.StepRecord
	for s := range rnd.IntN(3 * n) {
		from := g.Order[rnd.IntN(n)]
		to, by := g.Order[rnd.IntN(n)], "next"
		switch node, p := g.Nodes[from], rnd.IntN(10); {
		case p < 2:
			to, by = from, "retry"
		case p < 4:
			by = "on_error"
		case len(node.Next) > 0:
			to = node.Next[rnd.IntN(len(node.Next))].To
		}
		steps = append(steps, graph.StepRecord{Step: s + 1, Node: from, NextNode: to, RoutedBy: by})
	}
	return g, steps
}

// checkGeometry draws g as a run of steps left it and checks the layout's
// promises; it returns the layout.
func checkGeometry(t *testing.T, g *graph.Graph, steps []graph.StepRecord) *layered {
	t.Helper()
	edges := diagramEdges(g, steps)
	nodes, layers := layout(g, edges, graph.Nodes(g, steps, "", "", "running"))
	l := arrange(layers, edges, nodes)
	drawn := l.drawn()
	var boxes, labels []box
	for _, name := range g.Order {
		n := nodes[name]
		b := box{x: n.x, y: n.y, w: dgNodeW, h: dgNodeH, text: name}
		requireInside(t, l, b)
		boxes = append(boxes, b)
	}
	for _, d := range drawn {
		for _, lb := range d.labels {
			requireInside(t, l, lb)
			labels = append(labels, lb)
		}
	}
	requireApart(t, boxes, boxes, dgBadge, true)
	requireApart(t, labels, boxes, dgBadge, false)
	requireApart(t, labels, labels, 0, true)
	obstacles := append(append([]box(nil), boxes...), labels...)
	for _, d := range drawn {
		checkEdge(t, l, d, nodes, obstacles)
	}
	return l
}

// checkEdge checks that d starts on its node's border and ends on its
// target's, and that no piece of it comes inside any box of obstacles.
func checkEdge(t *testing.T, l *layered, d drawnEdge, nodes map[string]*dgNode, obstacles []box) {
	t.Helper()
	from, to := nodes[d.e.from], nodes[d.e.to]
	pl := polyline(d.path)
	require.True(t, onBorder(pl[0], from), "%s→%s starts at %v, not on %s's border", d.e.from, d.e.to, pl[0], d.e.from)
	require.True(t, onBorder(pl[len(pl)-1], to), "%s→%s ends at %v, not on %s's border", d.e.from, d.e.to, pl[len(pl)-1], d.e.to)
	for _, ob := range obstacles {
		for i := 1; i < len(pl); i++ {
			if crosses(pl[i-1], pl[i], ob) {
				t.Fatalf("edge %s→%s (%s) passes through %q's box %+v between %v and %v\npath %s", d.e.from, d.e.to, d.e.kind, ob.text, ob, pl[i-1], pl[i], d.path.d())
			}
		}
	}
	for _, q := range pl {
		require.True(t, q.x >= 0 && q.x <= l.width && q.y >= 0 && q.y <= l.bottom, "edge %s→%s leaves the drawing at %v", d.e.from, d.e.to, q)
	}
}

// onBorder reports whether q lies on n's box's border.
func onBorder(q pt, n *dgNode) bool {
	const tol = 0.01
	inX := q.x >= n.x-tol && q.x <= n.x+dgNodeW+tol
	inY := q.y >= n.y-tol && q.y <= n.y+dgNodeH+tol
	onX := math.Abs(q.x-n.x) < tol || math.Abs(q.x-n.x-dgNodeW) < tol
	onY := math.Abs(q.y-n.y) < tol || math.Abs(q.y-n.y-dgNodeH) < tol
	return inX && inY && (onX || onY)
}

// polyline is p with its turns sampled finely.
func polyline(p path) []pt {
	out := []pt{p.from}
	for _, s := range p.segs {
		a := out[len(out)-1]
		if s.op == 'L' {
			out = append(out, s.p[0])
			continue
		}
		for i := 1; i <= 16; i++ {
			u := float64(i) / 16
			v := 1 - u
			out = append(out, pt{v*v*a.x + 2*v*u*s.p[0].x + u*u*s.p[1].x, v*v*a.y + 2*v*u*s.p[0].y + u*u*s.p[1].y})
		}
	}
	return out
}

// crosses reports whether the segment from a to b comes inside box ob by
// more than eps (Liang-Barsky clipping).
func crosses(a, b pt, ob box) bool {
	x0, y0, x1, y1 := ob.x+eps, ob.y+eps, ob.x+ob.w-eps, ob.y+ob.h-eps
	if x1 <= x0 || y1 <= y0 {
		return false
	}
	t0, t1 := 0.0, 1.0
	dx, dy := b.x-a.x, b.y-a.y
	for _, c := range [][2]float64{{-dx, a.x - x0}, {dx, x1 - a.x}, {-dy, a.y - y0}, {dy, y1 - a.y}} {
		p, q := c[0], c[1]
		if p == 0 {
			if q <= 0 {
				return false
			}
			continue
		}
		r := q / p
		if p < 0 {
			t0 = max(t0, r)
		} else {
			t1 = min(t1, r)
		}
		if t0 >= t1 {
			return false
		}
	}
	return true
}

// requireApart requires that no box of as overlaps a box of bs (other
// than itself when they are the same list), each of bs grown by pad on
// its right and top (a node's visits badge).
func requireApart(t *testing.T, as, bs []box, pad float64, same bool) {
	t.Helper()
	for i, a := range as {
		for j, b := range bs {
			if same && i == j {
				continue
			}
			if a.x < b.x+b.w+pad && b.x < a.x+a.w && a.y < b.y+b.h && b.y-pad < a.y+a.h {
				t.Fatalf("%q %+v overlaps %q %+v", a.text, a, b.text, b)
			}
		}
	}
}

// requireInside requires b inside the drawing.
func requireInside(t *testing.T, l *layered, b box) {
	t.Helper()
	require.True(t, b.x >= 0 && b.y >= 0 && b.x+b.w <= l.width && b.y+b.h <= l.bottom, "%q %+v outside the drawing %vx%v", b.text, b, l.width, l.bottom)
}

// nodeBox is the box of node name in l.
func nodeBox(l *layered, name string) box {
	for n := range l.verts {
		if n.name == name {
			return box{x: n.x, y: n.y, w: dgNodeW, h: dgNodeH, text: name}
		}
	}
	return box{}
}

// BenchmarkDiagram: drawing a run's diagram, which the graph run page
// does on every refresh while the run is live: the repository's largest
// graph file, and random graphs of 12 and 24 nodes.
func BenchmarkDiagram(b *testing.B) {
	data, err := os.ReadFile(filepath.Join("..", "graph", "testdata", "pr_review.yaml"))
	require.NoError(b, err)
	g, _, err := graph.Parse("review/pr_review", data)
	require.NoError(b, err)
	cases := []struct {
		name  string
		g     *graph.Graph
		steps []graph.StepRecord
	}{{"pr_review", g, everyEdgeTwice(g)}}
	for _, n := range []int{12, 24} {
		rg, steps := randomGraph(11, n)
		cases = append(cases, struct {
			name  string
			g     *graph.Graph
			steps []graph.StepRecord
		}{fmt.Sprintf("random%d", n), rg, steps})
	}
	for _, c := range cases {
		rows := graph.Nodes(c.g, c.steps, "", "", "running")
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				_ = renderDiagram(c.g, rows, c.steps, "")
			}
		})
	}
}
