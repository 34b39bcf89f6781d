package monitor

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// The diagram's layout is layered (Sugiyama's method), in four steps:
//
//  1. Layers. A depth-first walk from the start marks the edges that close
//     a loop (back edges); a node's layer is its longest distance from the
//     start over the other edges, so each of them goes down (layout).
//  2. Lanes. Layer i is rank 2i; the rank between two layers holds edge
//     labels. An edge down from rank r to rank s has a dummy vertex, its
//     lane, in every rank between (the first one's label stands beside
//     it), so an edge that skips a layer passes it in a lane of its own
//     instead of through its nodes. A back edge leaves its node's right
//     side for a lane beside it, climbs through lanes in the ranks between
//     and enters its target's right side from a lane beside that; a node's
//     edge to itself is a lane beside it too, with its label beyond.
//  3. Order. Sweeps down and up the ranks sort each one by the barycenter
//     of its vertices' neighbours in the rank before, then swap
//     neighbours while that removes crossings; the order with the fewest
//     crossings wins. A node's side lanes stay to its right.
//  4. Coordinates. Each vertex joins the block of the vertex above it on
//     its edge where that crosses no long edge (Brandes and Köpf's
//     vertical alignment): a long edge's lanes are one block, so it runs
//     straight, and a node joins the middle edge that comes into it. The
//     blocks are packed from the left, then each in turn moves towards
//     where its links to other blocks pull it (a lane after the node its
//     edge leaves, a node after the edges that come in), as far as its
//     neighbours in every rank leave it room, until none moves.
//
// An edge goes straight down its lane within a rank (or, beside a node,
// across to its side lane) and jogs sideways only in the channel between
// two ranks, on a track of its own there, so that no two jogs overlap and
// two that go the same way do not cross: no edge passes through a node or
// a label.

// Diagram geometry, in viewBox units (CSS pixels at 100%).
const (
	dgNodeW    = 168.0
	dgNodeH    = 48.0
	dgMargin   = 24.0
	dgNodeGap  = 40.0 // between two nodes of a rank
	dgLaneGap  = 16.0 // between two lanes
	dgChannel  = 26.0 // between a rank and the next, at least: where edges jog
	dgTrack    = 5.0  // between two tracks of a channel
	dgTrackTop = 8.0  // above a channel's first track
	dgArrow    = 16.0 // below a channel's last track, above a node: an arrow's room
	dgLabelH   = 14.0 // a rank of labels
	dgLabelPad = 5.0  // between a lane and its label
	dgCharW    = 7.0  // the widest a label's character is (10.5px, bold when taken)
	dgLineH    = 12.0 // a line of a node's self loops' labels
	dgCorner   = 6.0  // an edge's turn beside a node
	dgPortStep = 24.0 // between the ports of a node's top or bottom, at most
	dgBadge    = 7.0  // how far the visits badge stands out of a node's box
)

// Route kinds.
const (
	routeDown = iota // down the ranks, bottom of one node to the top of another
	routeBack        // up the ranks, beside the nodes: a loop's way back
	routeSelf        // a node's edge to itself
)

// lvert is a vertex of the layered graph: a node, or a lane of an edge (a
// dummy in a rank the edge passes, or a side lane beside a node).
type lvert struct {
	rank  int
	node  *dgNode  // a node; nil for a lane
	owner *lvert   // a side lane: the node it stands beside
	route *lroute  // a lane: the edge it carries
	sides []*lvert // a node's side lanes, inner first
	unit  []*lvert // v and its side lanes (members)
	label string   // a lane's label, beside it in a label rank
	up    []*link  // links to the rank above
	down  []*link  // links to the rank below
	pos   int      // place in its rank
	order float64  // tie-break: the file's order
	x     float64  // a node's centre, a lane's x
	rel   float64  // x less its block's x
	// left and right are the room taken from x, half gaps included.
	left, right float64
	// portY are a side lane's ports on its owner's right side: where it
	// leaves or enters (and, for a self loop, comes back).
	portY [2]float64
}

// link joins two vertices of adjacent ranks along an edge: a in the rank
// above, b below, the edge at aOff and bOff from their x. Where the two
// differ, the edge jogs sideways in the channel between the ranks, on
// its track there (-1: it goes straight).
type link struct {
	a, b       *lvert
	aOff, bOff float64
	track      int
}

// lroute is an edge of the diagram in the layered graph: its vertices, in
// the order it passes them (a down route: its node, lanes, its target; a
// back route: the side lanes and lanes from the bottom up; a self loop:
// its side lane).
type lroute struct {
	e     *dgEdge
	kind  int
	chain []*lvert
	label string
}

// layered is the laid out diagram.
type layered struct {
	ranks  [][]*lvert // each rank's units: nodes (with their side lanes) and lanes
	verts  map[*dgNode]*lvert
	routes []*lroute
	top    []float64 // each rank's top
	height []float64 // each rank's height
	tracks []int     // the tracks of the channel below each rank
	width  float64
	bottom float64
}

// arrange lays out the nodes of layers (layout's) and edges.
func arrange(layers [][]*dgNode, edges []*dgEdge, nodes map[string]*dgNode) *layered {
	l := &layered{verts: map[*dgNode]*lvert{}}
	if len(layers) == 0 {
		return l
	}
	l.ranks = make([][]*lvert, 2*len(layers)-1)
	for li, layer := range layers {
		for _, n := range layer {
			v := &lvert{rank: 2 * li, node: n, order: n.order}
			l.verts[n] = v
			l.ranks[v.rank] = append(l.ranks[v.rank], v)
		}
	}
	for _, e := range edges {
		from, to := nodes[e.from], nodes[e.to]
		if from != nil && to != nil {
			l.addRoute(e, l.verts[from], l.verts[to])
		}
	}
	l.orderRanks()
	l.extents()
	l.ports()
	l.place()
	l.assignTracks()
	l.measure()
	return l
}

// edgeLabel is what the diagram writes beside e: its label, with how
// often it was taken past once.
func edgeLabel(e *dgEdge) string {
	label := e.label
	if e.taken > 1 {
		label = strings.TrimSpace(label + " ×" + strconv.Itoa(e.taken))
	}
	return clip(label, 34)
}

// labelWidth is the room a label takes, at most.
func labelWidth(s string) float64 {
	if s == "" {
		return 0
	}
	return float64(len([]rune(s))) * dgCharW
}

// addRoute adds e, from from to to, with its lanes and links.
func (l *layered) addRoute(e *dgEdge, from, to *lvert) {
	r := &lroute{e: e, label: edgeLabel(e)}
	l.routes = append(l.routes, r)
	switch {
	case from == to:
		r.kind = routeSelf
		r.chain = []*lvert{l.side(from, r)}
		return
	case from.rank < to.rank:
		r.kind = routeDown
		r.chain = []*lvert{from}
		for k := from.rank + 1; k < to.rank; k++ {
			r.chain = append(r.chain, l.lane(k, r, from))
		}
		r.chain = append(r.chain, to)
	default:
		r.kind = routeBack
		r.chain = []*lvert{l.side(from, r)}
		for k := from.rank - 1; k > to.rank; k-- {
			r.chain = append(r.chain, l.lane(k, r, from))
		}
		r.chain = append(r.chain, l.side(to, r))
	}
	for i := 1; i < len(r.chain); i++ {
		join(r.chain[i-1], r.chain[i])
	}
	r.chain[1].label = r.label
}

// lane is a new dummy of route r in rank k, placed first after src in
// the file's order.
func (l *layered) lane(k int, r *lroute, src *lvert) *lvert {
	v := &lvert{rank: k, route: r, order: src.order + 0.5}
	l.ranks[k] = append(l.ranks[k], v)
	return v
}

// side is a new side lane of route r beside the node v.
func (l *layered) side(v *lvert, r *lroute) *lvert {
	s := &lvert{rank: v.rank, route: r, owner: v, order: v.order}
	v.sides = append(v.sides, s)
	return s
}

// join links u and v, which stand in adjacent ranks.
func join(u, v *lvert) {
	if u.rank > v.rank {
		u, v = v, u
	}
	k := &link{a: u, b: v}
	u.down = append(u.down, k)
	v.up = append(v.up, k)
}

// other is the end of k that is not v.
func (k *link) other(v *lvert) *lvert {
	if k.a == v {
		return k.b
	}
	return k.a
}

// offsets are the offsets of k at v and at its other end.
func (k *link) offsets(v *lvert) (at, there float64) {
	if k.a == v {
		return k.aOff, k.bOff
	}
	return k.bOff, k.aOff
}

// links are v's links to the rank above (up) or below.
func (v *lvert) links(up bool) []*link {
	if up {
		return v.up
	}
	return v.down
}

// members are a unit of a rank: a node and its side lanes, or a lane.
func (v *lvert) members() []*lvert {
	if len(v.unit) != 1+len(v.sides) {
		v.unit = append([]*lvert{v}, v.sides...)
	}
	return v.unit
}

// index gives every vertex of rank r its place, a node's side lanes right
// after it.
func (l *layered) index(r int) {
	i := 0
	for _, u := range l.ranks[r] {
		for _, m := range u.members() {
			m.pos = i
			i++
		}
	}
}

// flat is rank r's vertices in their order, side lanes included.
func (l *layered) flat(r int) []*lvert {
	var out []*lvert
	for _, u := range l.ranks[r] {
		out = append(out, u.members()...)
	}
	return out
}

// orderRanks orders every rank to cross as few edges as it can.
func (l *layered) orderRanks() {
	for r := range l.ranks {
		sort.SliceStable(l.ranks[r], func(i, j int) bool { return l.ranks[r][i].order < l.ranks[r][j].order })
		l.index(r)
	}
	for r := 1; r < len(l.ranks); r++ {
		l.sortRank(r, true)
	}
	best, fewest := l.snapshot(), l.crossings()
	for i, stale := 0, 0; i < 24 && fewest > 0 && stale < 4; i++ {
		if i%2 == 0 {
			for r := len(l.ranks) - 2; r >= 0; r-- {
				l.sortRank(r, false)
			}
		} else {
			for r := 1; r < len(l.ranks); r++ {
				l.sortRank(r, true)
			}
		}
		l.transpose()
		stale++
		if c := l.crossings(); c < fewest {
			best, fewest, stale = l.snapshot(), c, 0
		}
	}
	l.restore(best)
	for _, rank := range l.ranks {
		for _, u := range rank {
			sortSides(u)
		}
	}
	for r := range l.ranks {
		l.index(r)
	}
}

// snapshot is the ranks' order.
func (l *layered) snapshot() [][]*lvert {
	out := make([][]*lvert, len(l.ranks))
	for r, rank := range l.ranks {
		out[r] = slices.Clone(rank)
	}
	return out
}

// restore sets the ranks' order to a snapshot's.
func (l *layered) restore(s [][]*lvert) {
	l.ranks = s
	for r := range l.ranks {
		l.index(r)
	}
}

// barycenter is the mean place of u's neighbours (those of its side lanes
// too) in the rank above (up) or below, and whether it has any.
func barycenter(u *lvert, up bool) (float64, bool) {
	sum, n := 0.0, 0
	for _, m := range u.members() {
		for _, k := range m.links(up) {
			sum += float64(k.other(m).pos)
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / float64(n), true
}

// sortRank sorts rank r's units by the barycenter of their neighbours in
// the rank above (up) or below; a unit without any keeps its place.
func (l *layered) sortRank(r int, up bool) {
	rank := l.ranks[r]
	type keyed struct {
		u  *lvert
		bc float64
	}
	var movable []keyed
	var slots []int
	for i, u := range rank {
		if bc, ok := barycenter(u, up); ok {
			movable = append(movable, keyed{u, bc})
			slots = append(slots, i)
		}
	}
	sort.SliceStable(movable, func(i, j int) bool {
		if movable[i].bc != movable[j].bc {
			return movable[i].bc < movable[j].bc
		}
		return movable[i].u.order < movable[j].u.order
	})
	for i, s := range slots {
		rank[s] = movable[i].u
	}
	l.index(r)
}

// transpose swaps neighbouring units of each rank while that leaves fewer
// crossings with the ranks beside it.
func (l *layered) transpose() {
	for pass := 0; pass < 4; pass++ {
		improved := false
		for r, rank := range l.ranks {
			for i := 0; i+1 < len(rank); i++ {
				if pairCrossings(rank[i+1], rank[i]) < pairCrossings(rank[i], rank[i+1]) {
					rank[i], rank[i+1] = rank[i+1], rank[i]
					l.index(r)
					improved = true
				}
			}
		}
		if !improved {
			return
		}
	}
}

// pairCrossings counts the crossings between the links of the units a and
// b, a standing left of b, with the ranks above and below.
func pairCrossings(a, b *lvert) int {
	n := 0
	for _, up := range []bool{true, false} {
		for _, ma := range a.members() {
			for _, ka := range ma.links(up) {
				for _, mb := range b.members() {
					for _, kb := range mb.links(up) {
						if ka.other(ma).pos > kb.other(mb).pos {
							n++
						}
					}
				}
			}
		}
	}
	return n
}

// crossings counts the crossing links between every two adjacent ranks.
func (l *layered) crossings() int {
	n := 0
	for r := 0; r+1 < len(l.ranks); r++ {
		var ends [][2]int
		for _, v := range l.flat(r) {
			for _, k := range v.down {
				ends = append(ends, [2]int{k.a.pos, k.b.pos})
			}
		}
		for i := range ends {
			for j := i + 1; j < len(ends); j++ {
				if (ends[i][0]-ends[j][0])*(ends[i][1]-ends[j][1]) < 0 {
					n++
				}
			}
		}
	}
	return n
}

// sortSides orders a node's side lanes from the inside out: the lanes of
// loops that leave it (each climbing to the rank above, in the order of
// where it goes there), then those of loops that come back to it (in the
// order of where they come from), then its self loops, outermost, so
// that no two of them cross beside it.
func sortSides(u *lvert) {
	group := func(s *lvert) int {
		switch {
		case s.route.kind == routeSelf:
			return 2
		case s.route.chain[0] == s:
			return 0
		}
		return 1
	}
	next := func(s *lvert) int {
		for _, k := range append(slices.Clone(s.up), s.down...) {
			return k.other(s).pos
		}
		return 0
	}
	sort.SliceStable(u.sides, func(i, j int) bool {
		gi, gj := group(u.sides[i]), group(u.sides[j])
		if gi != gj {
			return gi < gj
		}
		return next(u.sides[i]) < next(u.sides[j])
	})
	u.unit = nil
}

// selfLabels are the labels of u's self loops, at most three lines.
func selfLabels(u *lvert) []string {
	var out []string
	for _, s := range u.sides {
		if s.route.kind == routeSelf && s.route.label != "" {
			out = append(out, s.route.label)
		}
	}
	if len(out) > 3 {
		rest := out[2]
		for _, s := range out[3:] {
			rest += " · " + s
		}
		out = append(out[:2], clip(rest, 34))
	}
	return out
}

// extents sets the room every vertex takes on either side of its x: a
// node its box and half the gap to the next, a lane half the gap between
// lanes and its label, and a node's outermost side lane its self loops'
// labels too.
func (l *layered) extents() {
	for r := range l.ranks {
		for _, v := range l.flat(r) {
			if v.node != nil {
				v.left, v.right = dgNodeW/2+dgNodeGap/2, dgNodeW/2+dgNodeGap/2
				continue
			}
			v.left, v.right = dgLaneGap/2, dgLaneGap/2
			if v.label != "" {
				v.right += dgLabelPad + labelWidth(v.label)
			}
		}
	}
	for _, v := range l.verts {
		if len(v.sides) == 0 {
			continue
		}
		w := 0.0
		for _, s := range selfLabels(v) {
			w = max(w, labelWidth(s))
		}
		if w > 0 {
			v.sides[len(v.sides)-1].right += dgLabelPad + w
		}
	}
}

// ports spreads the links at a node's top and bottom over its width, in
// the order of their other ends, and places its side lanes' ports on its
// right side: the loops that leave it on top, the self loops nested in
// the middle, the loops that come back to it below.
func (l *layered) ports() {
	for _, v := range l.verts {
		spread(v, v.up)
		spread(v, v.down)
		sidePorts(v)
	}
}

// spread sets the offsets at v of links, centred, dgPortStep apart at
// most, in the order of their other ends.
func spread(v *lvert, links []*link) {
	ks := slices.Clone(links)
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].other(v).pos < ks[j].other(v).pos })
	n := float64(len(ks))
	step := min(dgPortStep, dgNodeW*0.7/max(n, 1))
	for i, k := range ks {
		off := (float64(i) - (n-1)/2) * step
		if k.a == v {
			k.aOff = off
		} else {
			k.bOff = off
		}
	}
}

// sidePorts places the ports of v's side lanes on its right side.
func sidePorts(v *lvert) {
	var leave, back, self []*lvert
	for _, s := range v.sides {
		switch {
		case s.route.kind == routeSelf:
			self = append(self, s)
		case s.route.chain[0] == s:
			leave = append(leave, s)
		default:
			back = append(back, s)
		}
	}
	slots := len(leave) + 2*len(self) + len(back)
	step := dgNodeH / float64(slots+1)
	y := func(k int) float64 { return step * float64(k+1) }
	for i, s := range leave {
		s.portY[0] = y(i)
	}
	base := len(leave)
	for j, s := range self {
		out := len(self) - 1 - j
		s.portY = [2]float64{y(base + out), y(base + 2*len(self) - 1 - out)}
	}
	for i, s := range back {
		s.portY[0] = y(slots - 1 - i)
	}
}

// pull is how much the link k pulls its end v towards its other end: most
// between two lanes, so that a long edge runs straight; a lane follows
// the node its edge leaves (down past its label, then to its target) and
// a node the edges that come into it, more than the other way round.
func pull(k *link, v *lvert) float64 {
	switch {
	case k.a.node == nil && k.b.node == nil:
		return 8
	case v.node == nil && k.a.node != nil:
		return 6 // a lane, to the node its edge leaves
	case v.node != nil && k.b == v:
		return 12 // a node, to an edge that comes in
	}
	return 1
}

// lblock is a vertical line of vertices that move together: a node with
// the edge that comes into it, the lanes of an edge, each member at its
// offset (rel) from the block's x.
type lblock struct {
	members []*lvert
	x       float64
	// after are the blocks that stand right of this one in some rank,
	// each with the least distance between the two blocks' x.
	after  map[*lblock]float64
	before map[*lblock]float64
}

// place gives every vertex its x: vertices join the blocks above them
// (blocks), the blocks are packed from the left, then each in turn moves
// towards where its links to other blocks want it, as far as its
// neighbours in every rank leave it room, until none moves.
func (l *layered) place() {
	blocks, of := l.blocks()
	packBlocks(blocks)
	for _, b := range blocks {
		b.moveTo(b.x)
	}
	for range 200 {
		moved := 0.0
		for _, b := range blocks {
			moved = max(moved, b.settle(of))
		}
		if moved < 0.05 {
			break
		}
	}
}

// blocks joins each vertex to the block above it where it can (alignUp),
// rank by rank, left to right, so that two joins never cross, and
// records which blocks stand right of which and how far.
func (l *layered) blocks() ([]*lblock, map[*lvert]*lblock) {
	of := map[*lvert]*lblock{}
	joined := map[*lvert]bool{} // a vertex something below has joined
	var blocks []*lblock
	for r := range l.ranks {
		crossing := l.crossingInner(r)
		last := -1
		for _, v := range l.flat(r) {
			if k := alignUp(v, crossing); k != nil && k.a.pos > last && !joined[k.a] {
				b := of[k.a]
				b.members = append(b.members, v)
				of[v], joined[k.a], last = b, true, k.a.pos
				v.rel = k.a.rel + k.aOff - k.bOff
				continue
			}
			b := &lblock{members: []*lvert{v}, after: map[*lblock]float64{}, before: map[*lblock]float64{}}
			blocks = append(blocks, b)
			of[v] = b
		}
	}
	for r := range l.ranks {
		vs := l.flat(r)
		for i := 1; i < len(vs); i++ {
			p, w := vs[i-1], vs[i]
			a, b := of[p], of[w]
			d := p.right + w.left + p.rel - w.rel
			a.after[b] = max(a.after[b], d)
			b.before[a] = max(b.before[a], d)
		}
	}
	return blocks, of
}

// alignUp is the link along which v joins the block above it, or nil: a
// lane joins the lane above it on its edge, or the node its edge leaves
// when that node has no other edge down; a node joins the edge that comes
// into it in the middle of the others (the left one of the two middle
// ones first), unless that would cross a long edge.
func alignUp(v *lvert, crossing map[*link]bool) *link {
	if len(v.up) == 0 {
		return nil
	}
	if v.node == nil {
		if k := v.up[0]; k.a.node == nil || len(k.a.down) == 1 && !crossing[k] {
			return k
		}
		return nil
	}
	ks := slices.Clone(v.up)
	sort.SliceStable(ks, func(i, j int) bool { return ks[i].a.pos < ks[j].a.pos })
	for _, m := range []int{(len(ks) - 1) / 2, len(ks) / 2} {
		if !crossing[ks[m]] {
			return ks[m]
		}
	}
	return nil
}

// crossingInner are the links from rank r-1 down to rank r that cross a
// link between two lanes there: joining along them would bend a long
// edge.
func (l *layered) crossingInner(r int) map[*link]bool {
	out := map[*link]bool{}
	if r == 0 {
		return out
	}
	var inner, other []*link
	for _, v := range l.flat(r) {
		for _, k := range v.up {
			if k.a.node == nil && k.b.node == nil {
				inner = append(inner, k)
			} else {
				other = append(other, k)
			}
		}
	}
	for _, k := range other {
		for _, i := range inner {
			if (k.a.pos-i.a.pos)*(k.b.pos-i.b.pos) < 0 {
				out[k] = true
			}
		}
	}
	return out
}

// moveTo puts b, and its members at their offsets, at x.
func (b *lblock) moveTo(x float64) {
	b.x = x
	for _, v := range b.members {
		v.x = x + v.rel
	}
}

// packBlocks places every block as far left as the blocks left of it
// allow (the longest path of the distances, in an order where each block
// comes after those left of it).
func packBlocks(blocks []*lblock) {
	waiting := map[*lblock]int{}
	var ready []*lblock
	for _, b := range blocks {
		waiting[b] = len(b.before)
		if waiting[b] == 0 {
			ready = append(ready, b)
		}
	}
	for len(ready) > 0 {
		b := ready[0]
		ready = ready[1:]
		for _, a := range sortedBlocks(b.after, blocks) {
			a.x = max(a.x, b.x+b.after[a])
			if waiting[a]--; waiting[a] == 0 {
				ready = append(ready, a)
			}
		}
	}
}

// sortedBlocks are the keys of m in the order of blocks, so that packing
// does not depend on a map's order.
func sortedBlocks(m map[*lblock]float64, blocks []*lblock) []*lblock {
	out := make([]*lblock, 0, len(m))
	for _, b := range blocks {
		if _, ok := m[b]; ok {
			out = append(out, b)
		}
	}
	return out
}

// settle moves b to where its links to other blocks want it, each want
// weighed by its pull, as far as the blocks beside it leave room, and is
// how far it moved.
func (b *lblock) settle(of map[*lvert]*lblock) float64 {
	sum, ws := 0.0, 0.0
	for _, v := range b.members {
		for _, k := range append(slices.Clone(v.up), v.down...) {
			w := k.other(v)
			if of[w] == b {
				continue
			}
			at, there := k.offsets(v)
			sum += pull(k, v) * (w.x + there - at - v.rel)
			ws += pull(k, v)
		}
	}
	if ws == 0 {
		return 0
	}
	lo, hi := math.Inf(-1), math.Inf(1)
	for a, d := range b.before {
		lo = max(lo, a.x+d)
	}
	for a, d := range b.after {
		hi = min(hi, a.x-d)
	}
	x := min(max(sum/ws, lo), hi)
	moved := math.Abs(x - b.x)
	b.moveTo(x)
	return moved
}

// measure sets each rank's top and height and each channel's, shifts the
// vertices so that what is drawn starts at the margin, places the nodes,
// and sets the diagram's size.
func (l *layered) measure() {
	l.top = make([]float64, len(l.ranks))
	l.height = make([]float64, len(l.ranks))
	y := dgMargin
	for r := range l.ranks {
		l.top[r] = y
		l.height[r] = dgLabelH
		if r%2 == 0 {
			l.height[r] = dgNodeH
		}
		y += l.height[r]
		if r+1 < len(l.ranks) {
			y += l.channel(r)
		}
	}
	l.bottom = y + dgMargin
	lo, hi := math.Inf(1), math.Inf(-1)
	for r := range l.ranks {
		for _, v := range l.flat(r) {
			a, b := drawnExtent(v)
			lo, hi = min(lo, a), max(hi, b)
		}
	}
	shift := dgMargin - lo
	for r := range l.ranks {
		for _, v := range l.flat(r) {
			v.x += shift
			if v.node != nil {
				v.node.x, v.node.y = v.x-dgNodeW/2, l.top[r]
			}
		}
	}
	l.width = hi - lo + 2*dgMargin
}

// drawnExtent is how far left and right of 0 what v draws reaches: a
// node's box and its visits badge, a lane its label, an outermost side
// lane its node's self loops' labels.
func drawnExtent(v *lvert) (float64, float64) {
	if v.node != nil {
		return v.x - dgNodeW/2, v.x + dgNodeW/2 + dgBadge
	}
	right := v.x
	if v.label != "" {
		right += dgLabelPad + labelWidth(v.label)
	}
	if o := v.owner; o != nil && o.sides[len(o.sides)-1] == v {
		for _, s := range selfLabels(o) {
			right = max(right, v.x+dgLabelPad+labelWidth(s))
		}
	}
	return v.x, right
}

// assignTracks gives each link that jogs sideways a track of its channel
// (the height at which it goes across) so that no two jogs whose spans
// overlap share one, and two that go the same way do not cross: going
// right, the one that starts further right turns first (higher), going
// left the one that starts further left. Links that go straight down
// have none.
func (l *layered) assignTracks() {
	l.tracks = make([]int, len(l.ranks))
	for r := 0; r+1 < len(l.ranks); r++ {
		var right, left []*link
		for _, v := range l.flat(r) {
			for _, k := range v.down {
				k.track = -1
				switch xa, xb := k.ends(); {
				case xb-xa > 0.5:
					right = append(right, k)
				case xa-xb > 0.5:
					left = append(left, k)
				}
			}
		}
		sort.SliceStable(right, func(i, j int) bool { return right[i].aOff+right[i].a.x > right[j].aOff+right[j].a.x })
		sort.SliceStable(left, func(i, j int) bool { return left[i].aOff+left[i].a.x < left[j].aOff+left[j].a.x })
		var done []*link
		for _, k := range append(right, left...) {
			k.track = freeTrack(k, done)
			done = append(done, k)
			l.tracks[r] = max(l.tracks[r], k.track+1)
		}
	}
}

// ends are the x of k's two ends: above, below.
func (k *link) ends() (xa, xb float64) { return k.a.x + k.aOff, k.b.x + k.bOff }

// rightward reports whether k jogs to the right going down.
func (k *link) rightward() bool {
	xa, xb := k.ends()
	return xb > xa
}

// overlaps reports whether the spans of k's and o's jogs come within a
// lane's gap of each other.
func (k *link) overlaps(o *link) bool {
	a1, b1 := k.ends()
	a2, b2 := o.ends()
	return min(a1, b1) < max(a2, b2)+dgLaneGap/2 && min(a2, b2) < max(a1, b1)+dgLaneGap/2
}

// freeTrack is the track of k among the links of its channel given one
// already (done): below every one that goes its way and overlaps it,
// and on none that goes the other way and overlaps it.
func freeTrack(k *link, done []*link) int {
	t := 0
	for _, o := range done {
		if o.rightward() == k.rightward() && k.overlaps(o) {
			t = max(t, o.track+1)
		}
	}
	for {
		taken := false
		for _, o := range done {
			taken = taken || o.track == t && o.rightward() != k.rightward() && k.overlaps(o)
		}
		if !taken {
			return t
		}
		t++
	}
}

// channel is the height of the channel below rank r: its tracks, with
// room above them and, above a node, room for an arrow below them.
func (l *layered) channel(r int) float64 {
	return max(dgChannel, dgTrackTop+l.below(r)+float64(max(l.tracks[r]-1, 0))*dgTrack)
}

// below is the room under the last track of the channel below rank r.
func (l *layered) below(r int) float64 {
	if (r+1)%2 == 0 {
		return dgArrow
	}
	return dgTrackTop
}

// trackY is the height of k's track.
func (l *layered) trackY(k *link) float64 {
	r := k.a.rank
	y0, y1 := l.bottomOf(r)+dgTrackTop, l.top[r+1]-l.below(r)
	used := float64(max(l.tracks[r]-1, 0)) * dgTrack
	return y0 + (y1-y0-used)/2 + float64(k.track)*dgTrack
}
