package monitor

import (
	"fmt"
	"html"
	"html/template"
	"strings"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/hooks"
)

// The graph run page's diagram: the pinned definition's nodes and edges
// as one server-side SVG (no script draws it), in a layered layout
// (graph_layout.go) from the start down: a loop's way back climbs on the
// right of the nodes, dashed, and an edge that skips a layer passes it in
// a lane of its own, never through a node. Nodes are coloured by their
// status in the node table, the node in flight is outlined and pulses,
// and every edge the run took (a step's next node, its error route, a
// retry) is drawn solid and dark with how often it was taken.

// dgEdge is an edge of the diagram.
type dgEdge struct {
	from, to string
	label    string
	kind     string // next | error | retry
	back     bool   // closes a loop: drawn around, on the right
	taken    int    // how often the run took it
}

// dgNode is a node placed in the diagram.
type dgNode struct {
	name  string
	layer int
	x, y  float64 // top left
	order float64
	row   graph.NodeRow
}

// condText is a short text of an edge's condition.
func condText(c *hooks.Condition) string {
	if c == nil {
		return ""
	}
	switch {
	case len(c.All) > 0:
		parts := make([]string, 0, len(c.All))
		for i := range c.All {
			parts = append(parts, condText(c.All[i]))
		}
		return strings.Join(parts, " and ")
	case len(c.Any) > 0:
		parts := make([]string, 0, len(c.Any))
		for i := range c.Any {
			parts = append(parts, condText(c.Any[i]))
		}
		return "(" + strings.Join(parts, " or ") + ")"
	case c.Not != nil:
		return "not " + condText(c.Not)
	}
	v := fmt.Sprint(c.Value)
	if c.Op == "exists" {
		return c.Path + " exists"
	}
	return fmt.Sprintf("%s %s %s", c.Path, opText(c.Op), v)
}

func opText(op string) string {
	switch op {
	case "eq":
		return "="
	case "ne":
		return "≠"
	case "gt":
		return ">"
	case "gte":
		return "≥"
	case "lt":
		return "<"
	case "lte":
		return "≤"
	}
	return op
}

// diagramEdges are g's edges: each node's next entries and its on_error
// route, and the retries and routes the run took that are no edge of the
// file (a retry goes back to its node; config.on_error routes anywhere).
func diagramEdges(g *graph.Graph, steps []graph.StepRecord) []*dgEdge {
	out := fileEdges(g)
	for _, s := range steps {
		if s.NextNode == "" || g.Node(s.NextNode) == nil || g.Node(s.Node) == nil {
			continue
		}
		var e *dgEdge
		out, e = takenEdge(out, s)
		e.taken++
	}
	return out
}

// fileEdges are the edges g's file declares, in file order: each node's
// next entries, a wait_message's on_timeout, then its on_error route.
func fileEdges(g *graph.Graph) []*dgEdge {
	var out []*dgEdge
	for _, name := range g.Order {
		n := g.Nodes[name]
		for i, e := range n.Next {
			out = append(out, &dgEdge{from: name, to: e.To, label: nextLabel(n, i), kind: "next"})
		}
		if t := n.TimeoutNode(); t != "" {
			out = append(out, &dgEdge{from: name, to: t, label: routedOnTimeout, kind: "next"})
		}
		if n.OnError != "" {
			out = append(out, &dgEdge{from: name, to: n.OnError, label: "on_error", kind: "error"})
		}
	}
	return out
}

// routedOnTimeout labels a wait_message's on_timeout edge, and is how a
// step that took it was routed.
const routedOnTimeout = "on_timeout"

// nextLabel is the label of n's i-th next entry: its condition, "else" for
// the unconditioned entry of several, and a condition numbered from the
// second entry on when there are more than two (the order in which they
// are tried then matters to the reader).
func nextLabel(n *graph.Node, i int) string {
	e := n.Next[i]
	label := condText(e.When)
	if e.When == nil && len(n.Next) > 1 {
		label = "else"
	}
	if i > 0 && label != "" && len(n.Next) > 2 && e.When != nil {
		label = fmt.Sprintf("%d: %s", i+1, label)
	}
	return label
}

// takenEdge is the edge of edges that step s took, appended to them when
// the file has none: a retry is an edge of its own, an error route falls
// back on a next edge to the same node, and a route the file does not
// declare is labelled with what routed it.
func takenEdge(edges []*dgEdge, s graph.StepRecord) ([]*dgEdge, *dgEdge) {
	if s.RoutedBy == routedOnTimeout {
		for _, e := range edges {
			if e.from == s.Node && e.to == s.NextNode && e.label == routedOnTimeout {
				return edges, e
			}
		}
	}
	kind := "next"
	switch s.RoutedBy {
	case "retry":
		kind = "retry"
	case "on_error":
		kind = "error"
	}
	e := findEdge(edges, s.Node, s.NextNode, kind)
	if e == nil && kind == "error" {
		e = findEdge(edges, s.Node, s.NextNode, "next")
	}
	if e != nil {
		return edges, e
	}
	label := "on_error"
	if kind == "retry" {
		label = "retry"
	}
	if kind == "next" {
		label = s.RoutedBy
	}
	e = &dgEdge{from: s.Node, to: s.NextNode, label: label, kind: kind}
	return append(edges, e), e
}

// findEdge is the first edge of edges from from to to of kind, or nil.
func findEdge(edges []*dgEdge, from, to, kind string) *dgEdge {
	for _, e := range edges {
		if e.from == from && e.to == to && (e.kind == kind || kind == "next" && e.kind == "next") {
			return e
		}
	}
	return nil
}

// layout puts g's nodes in layers and marks the edges that close loops.
func layout(g *graph.Graph, edges []*dgEdge, rows []graph.NodeRow) (map[string]*dgNode, [][]*dgNode) {
	outs := map[string][]*dgEdge{}
	for _, e := range edges {
		outs[e.from] = append(outs[e.from], e)
	}
	layer := longestPaths(g, outs, markBackEdges(g, outs))
	return layerNodes(g, layer, rows)
}

// markBackEdges walks g depth-first from the start (then from every node
// not reached, in file order) over outs, the edges by their node of
// origin, and marks back the edges that close a loop: those to a node on
// the walk's stack. It returns the nodes in post-order, whose reverse is a
// topological order of the edges that go forward.
func markBackEdges(g *graph.Graph, outs map[string][]*dgEdge) []string {
	state := map[string]int{} // 0 new, 1 on the stack, 2 done
	var post []string
	var visit func(string)
	visit = func(v string) {
		state[v] = 1
		for _, e := range outs[v] {
			if g.Node(e.to) == nil {
				continue
			}
			switch state[e.to] {
			case 0:
				visit(e.to)
			case 1:
				e.back = true
			}
		}
		state[v] = 2
		post = append(post, v)
	}
	if g.Node(g.Start) != nil {
		visit(g.Start)
	}
	for _, name := range g.Order {
		if state[name] == 0 {
			visit(name)
		}
	}
	return post
}

// longestPaths is each node's layer: its longest distance from a node
// without forward edges into it, over the forward edges of outs, taken in
// the topological order that post (markBackEdges's post-order) reverses.
func longestPaths(g *graph.Graph, outs map[string][]*dgEdge, post []string) map[string]int {
	layer := map[string]int{}
	for i := len(post) - 1; i >= 0; i-- {
		v := post[i]
		for _, e := range outs[v] {
			if !e.back && g.Node(e.to) != nil && layer[e.to] < layer[v]+1 {
				layer[e.to] = layer[v] + 1
			}
		}
	}
	return layer
}

// layerNodes makes g's nodes, each with its row of the node table, and
// puts them in their layers in file order, which is also the order a
// layer's nodes start from.
func layerNodes(g *graph.Graph, layer map[string]int, rows []graph.NodeRow) (map[string]*dgNode, [][]*dgNode) {
	rowOf := map[string]graph.NodeRow{}
	for _, r := range rows {
		rowOf[r.Node] = r
	}
	nodes := map[string]*dgNode{}
	var layers [][]*dgNode
	for i, name := range g.Order {
		l := layer[name]
		for len(layers) <= l {
			layers = append(layers, nil)
		}
		n := &dgNode{name: name, layer: l, order: float64(i), row: rowOf[name]}
		nodes[name] = n
		layers[l] = append(layers[l], n)
	}
	return nodes, layers
}

// renderDiagram draws g as an SVG: rows are the node table (status,
// visits), steps the run's steps (the edges taken), current the node in
// flight ("" when none).
func renderDiagram(g *graph.Graph, rows []graph.NodeRow, steps []graph.StepRecord, current string) template.HTML {
	if g == nil || len(g.Order) == 0 {
		return ""
	}
	edges := diagramEdges(g, steps)
	nodes, layers := layout(g, edges, rows)
	l := arrange(layers, edges, nodes)
	var b strings.Builder
	fmt.Fprintf(&b, `<svg class="graph" viewBox="0 0 %[1]s %[2]s" width="%[1]s" height="%[2]s" role="img" aria-label="graph %[3]s: nodes and edges">`,
		num(l.width), num(l.bottom), esc(g.Name))
	b.WriteString(`<defs>`)
	for _, k := range []string{"next", "taken", "error", "retry"} {
		fmt.Fprintf(&b, `<marker id="arrow-%s" class="m-%s" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z"></path></marker>`, k, k)
	}
	b.WriteString(`</defs>`)
	// Edges first, under their labels and the nodes.
	drawn := l.drawn()
	for _, d := range drawn {
		writeEdge(&b, d)
	}
	for _, d := range drawn {
		writeLabels(&b, d)
	}
	if n := nodes[g.Start]; n != nil {
		fmt.Fprintf(&b, `<text class="start" x="%s" y="%s" text-anchor="middle">start</text>`, num(n.x+dgNodeW/2), num(n.y-6))
	}
	for _, name := range g.Order {
		writeNode(&b, g.Nodes[name], nodes[name], name == current)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String()) //nolint:gosec // every text in it is escaped by writeEdge, writeLabels and writeNode
}

// writeEdge draws the edge d as a path with its title. A taken edge is
// drawn solid and dark, and a taken next edge ends in the arrow of its
// own.
func writeEdge(b *strings.Builder, d drawnEdge) {
	e := d.e
	class := "edge e-" + e.kind
	marker := e.kind
	if e.taken > 0 {
		class += " taken"
		if e.kind == "next" {
			marker = "taken"
		}
	}
	if e.back {
		class += " back"
	}
	fmt.Fprintf(b, `<path class="%s" d="%s" marker-end="url(#arrow-%s)"><title>%s → %s%s%s</title></path>`,
		class, d.path.d(), marker, esc(e.from), esc(e.to), esc(labelSuffix(e.label)), takenSuffix(e.taken))
}

// writeLabels writes the labels of the edge d (its condition, with how
// often it was taken past once), each left aligned in its box.
func writeLabels(b *strings.Builder, d drawnEdge) {
	for _, lb := range d.labels {
		fmt.Fprintf(b, `<text class="elabel e-%s%s" x="%s" y="%s" text-anchor="start">%s</text>`,
			d.e.kind, ifTaken(d.e.taken), num(lb.x), num(lb.y+lb.h-3.5), esc(lb.text))
	}
}

// writeNode draws the placed node n of the definition's node: a box
// classed by its status in the node table (visited, in flight when
// current, routed by an error route), its name, its kind and action, a
// title that says them with its visits and details, and a badge with its
// visits past one.
func writeNode(b *strings.Builder, node *graph.Node, n *dgNode, current bool) {
	status := n.row.Status
	if status == "" {
		status = graph.NodeNotReached
	}
	class := "gnode n-" + status
	if n.row.Visits > 0 {
		class += " visited"
	}
	if current {
		class += " current"
	}
	if n.row.Routed {
		class += " routed"
	}
	kind := node.Kind
	if kind == "" {
		kind = graph.KindAction
	}
	sub := kind
	if node.Action != nil {
		sub += " · " + node.Action.ID()
	}
	fmt.Fprintf(b, `<g class="%s" data-node="%s"><title>%s (%s): %s, %d visit%s%s</title>`, class, esc(n.name), esc(n.name), esc(kind),
		esc(status), n.row.Visits, visitsS(n.row.Visits), detailSuffix(n.row))
	shape := "rect"
	if kind == graph.KindReturn {
		shape = "return"
	}
	fmt.Fprintf(b, `<rect class="box %s" x="%s" y="%s" width="%s" height="%s" rx="%d"></rect>`, shape, num(n.x), num(n.y), num(dgNodeW), num(dgNodeH), map[bool]int{true: 22, false: 7}[shape == "return"])
	fmt.Fprintf(b, `<text class="name" x="%s" y="%s" text-anchor="middle">%s</text>`, num(n.x+dgNodeW/2), num(n.y+20), esc(clip(n.name, 18)))
	fmt.Fprintf(b, `<text class="kind" x="%s" y="%s" text-anchor="middle">%s</text>`, num(n.x+dgNodeW/2), num(n.y+37), esc(clip(sub, 25)))
	if n.row.Visits > 1 {
		cx := num(n.x + dgNodeW + dgBadge - 11)
		fmt.Fprintf(b, `<g class="visits"><circle cx="%s" cy="%s" r="11"></circle><text x="%s" y="%s" text-anchor="middle">×%d</text></g>`,
			cx, num(n.y+11-dgBadge), cx, num(n.y+15-dgBadge), n.row.Visits)
	}
	b.WriteString(`</g>`)
}

func esc(s string) string { return html.EscapeString(s) }

func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func visitsS(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

func labelSuffix(l string) string {
	if l == "" {
		return ""
	}
	return " (" + l + ")"
}

func takenSuffix(n int) string {
	switch n {
	case 0:
		return ", not taken"
	case 1:
		return ", taken once"
	}
	return fmt.Sprintf(", taken %d times", n)
}

func ifTaken(n int) string {
	if n > 0 {
		return " taken"
	}
	return ""
}

func detailSuffix(r graph.NodeRow) string {
	var parts []string
	if r.Children != "" {
		parts = append(parts, r.Children)
	}
	if r.Detail != "" {
		parts = append(parts, r.Detail)
	}
	if len(parts) == 0 {
		return ""
	}
	return "; " + strings.Join(parts, "; ")
}
