package monitor

import (
	"math"
	"strconv"
	"strings"
)

// The drawn diagram: each edge's path through its lanes and the boxes of
// its labels, from the layered layout (graph_layout.go). A path is lines
// and Bézier curves; a curve runs only in the channel between two ranks
// (its control points too, so all of it does), a line only down a lane
// or across from a node's side to its side lane.

// pt is a point of the diagram.
type pt struct{ x, y float64 }

// seg is a piece of a path from where the previous one ended: a line to
// p[0] (op 'L') or a quadratic curve through p[0] to p[1] ('Q').
type seg struct {
	op byte
	p  []pt
}

// path is a path of the diagram: a start and its pieces.
type path struct {
	from pt
	segs []seg
}

// at is where the path has got to.
func (p *path) at() pt {
	if len(p.segs) == 0 {
		return p.from
	}
	s := p.segs[len(p.segs)-1]
	return s.p[len(s.p)-1]
}

func (p *path) lineTo(q pt) {
	if q != p.at() {
		p.segs = append(p.segs, seg{'L', []pt{q}})
	}
}

func (p *path) quadTo(c, q pt) { p.segs = append(p.segs, seg{'Q', []pt{c, q}}) }

// jog goes from where the path is, down or up, to q: straight when q is
// right below or above, else along to x at height y (a channel's track)
// with rounded turns.
func (p *path) jog(q pt, y float64) {
	a := p.at()
	dx := q.x - a.x
	if math.Abs(dx) < 0.5 {
		p.lineTo(q)
		return
	}
	sx, sy1, sy2 := sign(dx), sign(y-a.y), sign(q.y-y)
	r := min(dgCorner, math.Abs(dx)/2, math.Abs(y-a.y), math.Abs(q.y-y))
	p.lineTo(pt{a.x, y - sy1*r})
	p.quadTo(pt{a.x, y}, pt{a.x + sx*r, y})
	p.lineTo(pt{q.x - sx*r, y})
	p.quadTo(pt{q.x, y}, pt{q.x, y + sy2*r})
	p.lineTo(q)
}

func sign(f float64) float64 {
	if f < 0 {
		return -1
	}
	return 1
}

// d is the path's SVG path data.
func (p *path) d() string {
	var b strings.Builder
	b.WriteString("M" + num(p.from.x) + "," + num(p.from.y))
	for _, s := range p.segs {
		b.WriteString(" " + string(s.op))
		for i, q := range s.p {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(num(q.x) + "," + num(q.y))
		}
	}
	return b.String()
}

// box is a rectangle of the diagram: a node's, a label's.
type box struct {
	x, y, w, h float64
	text       string
}

// drawnEdge is an edge as drawn: its path and its labels.
type drawnEdge struct {
	e      *dgEdge
	path   path
	labels []box
}

// drawn is every edge of l as drawn, in the order of the routes.
func (l *layered) drawn() []drawnEdge {
	out := make([]drawnEdge, 0, len(l.routes))
	for _, r := range l.routes {
		d := drawnEdge{e: r.e}
		switch r.kind {
		case routeDown:
			d.path = l.downPath(r)
		case routeBack:
			d.path = l.backPath(r)
		default:
			d.path = l.selfPath(r)
		}
		d.labels = l.labelBoxes(r)
		out = append(out, d)
	}
	return out
}

// bottomOf is the bottom of rank r.
func (l *layered) bottomOf(r int) float64 { return l.top[r] + l.height[r] }

// downPath goes from a port of its node's bottom, through its lanes, to a
// port of its target's top.
func (l *layered) downPath(r *lroute) path {
	src := r.chain[0]
	k := linkBetween(src, r.chain[1])
	p := path{from: pt{src.x + k.aOff, l.bottomOf(src.rank)}}
	for i := 1; i < len(r.chain); i++ {
		q := r.chain[i]
		k := linkBetween(r.chain[i-1], q)
		p.jog(pt{q.x + k.bOff, l.top[q.rank]}, l.trackY(k))
		if q.node == nil {
			p.lineTo(pt{q.x, l.bottomOf(q.rank)})
		}
	}
	return p
}

// linkBetween is the link from a down to b.
func linkBetween(a, b *lvert) *link {
	for _, k := range a.down {
		if k.b == b {
			return k
		}
	}
	return &link{a: a, b: b, track: -1}
}

// backPath leaves its node's right side for its side lane, climbs through
// its lanes and enters its target's right side from the side lane there.
func (l *layered) backPath(r *lroute) path {
	s := r.chain[0]
	p := l.leaveSide(s, l.top[s.rank]+s.portY[0])
	p.lineTo(pt{s.x, l.top[s.rank]})
	for i := 1; i < len(r.chain); i++ {
		q := r.chain[i]
		p.jog(pt{q.x, l.bottomOf(q.rank)}, l.trackY(linkBetween(q, r.chain[i-1])))
		if i < len(r.chain)-1 {
			p.lineTo(pt{q.x, l.top[q.rank]})
		}
	}
	t := r.chain[len(r.chain)-1]
	l.enterSide(&p, t, l.top[t.rank]+t.portY[0])
	return p
}

// selfPath leaves its node's right side for its side lane and comes back.
func (l *layered) selfPath(r *lroute) path {
	s := r.chain[0]
	y1, y2 := l.top[s.rank]+s.portY[0], l.top[s.rank]+s.portY[1]
	p := l.leaveSide(s, y1)
	l.enterSide(&p, s, y2)
	return p
}

// corner is the radius of a turn beside a node at y in the side lane s.
func (l *layered) corner(s *lvert, y float64) float64 {
	side := s.owner.x + dgNodeW/2
	return max(0, min(dgCorner, (s.x-side)/2, y-l.top[s.rank], l.bottomOf(s.rank)-y))
}

// leaveSide starts a path at height y of the right side of s's node and
// turns into s, going up when it must climb out of the rank, else down.
func (l *layered) leaveSide(s *lvert, y float64) path {
	side := s.owner.x + dgNodeW/2
	c := l.corner(s, y)
	dir := -1.0
	if s.route.kind == routeSelf {
		dir = 1
	}
	p := path{from: pt{side, y}}
	p.lineTo(pt{s.x - c, y})
	p.quadTo(pt{s.x, y}, pt{s.x, y + dir*c})
	return p
}

// enterSide goes on in the side lane s to height y and turns into the
// right side of its node.
func (l *layered) enterSide(p *path, s *lvert, y float64) {
	side := s.owner.x + dgNodeW/2
	c := l.corner(s, y)
	dir := 1.0 // coming up from below
	if p.at().y < y {
		dir = -1
	}
	p.lineTo(pt{s.x, y + dir*c})
	p.quadTo(pt{s.x, y}, pt{s.x - c, y})
	p.lineTo(pt{side, y})
}

// labelBoxes are the boxes of r's labels: beside its first lane in a
// label rank, or a self loop's beyond its node's outermost side lane,
// stacked with the node's other self loops' labels around its middle.
func (l *layered) labelBoxes(r *lroute) []box {
	if r.label == "" {
		return nil
	}
	if r.kind != routeSelf {
		v := r.chain[1]
		return []box{{x: v.x + dgLabelPad, y: l.top[v.rank], w: labelWidth(v.label), h: dgLabelH, text: v.label}}
	}
	s := r.chain[0]
	u := s.owner
	lines := selfLabels(u)
	mine := 0
	for _, o := range u.sides {
		if o.route.kind != routeSelf || o.route.label == "" {
			continue
		}
		if o == s {
			break
		}
		mine++
	}
	if mine >= len(lines) {
		return nil // joined into the last line, which the third loop writes
	}
	outer := u.sides[len(u.sides)-1]
	y0 := l.top[u.rank] + dgNodeH/2 - float64(len(lines))*dgLineH/2
	t := lines[mine]
	return []box{{x: outer.x + dgLabelPad, y: y0 + float64(mine)*dgLineH, w: labelWidth(t), h: dgLineH, text: t}}
}

// num writes a coordinate to a tenth of a unit, without trailing zeros.
func num(f float64) string {
	return strconv.FormatFloat(math.Round(f*10)/10, 'f', -1, 64)
}
