package monitor

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/transcript"
)

// Timeline is a thread's waterfall: its turns, model calls, tool calls and
// waits, placed by the timestamps of its transcript's events. A model
// call is timed from the event before its answer (the previous turn's end,
// the user message, a tool result) to the answer; a tool call from its
// tool_call_start to its tool_call_result; a wait on children from
// thread_waiting to the first event after the wake; a wait for approval
// from approval_requested to approval_decided. A turn runs from its model
// call's start to the next turn's (or the thread's end), its tool calls
// and any wait after them included. /api/threads/ID/timeline returns it.
type Timeline struct {
	ThreadID string    `json:"thread_id"`
	Start    time.Time `json:"start"`
	End      time.Time `json:"end"`
	// Open: the thread has not finished; End is when the timeline was read
	// and the spans still going end there.
	Open  bool   `json:"open"`
	Spans []Span `json:"spans"`
	// Turns, Spend and the wall time of model calls, tool calls and
	// waits: the seconds during which at least one ran, so tool calls run
	// at once (a turn's spawns) count once, not one after the other.
	Turns        int     `json:"turns"`
	Spend        float64 `json:"spend"`
	ModelSeconds float64 `json:"model_seconds"`
	ToolSeconds  float64 `json:"tool_seconds"`
	WaitSeconds  float64 `json:"wait_seconds"`
}

// Span kinds.
const (
	SpanTurn     = "turn"
	SpanModel    = "model"
	SpanTool     = "tool"
	SpanWait     = "wait"     // on children
	SpanApproval = "approval" // a gated call waiting for a person
	SpanError    = "error"    // a failed model call (an instant)
	SpanMessage  = "message"  // a person's message (an instant)
)

// Span is one row of the waterfall.
type Span struct {
	Kind    string    `json:"kind"`
	Label   string    `json:"label"`
	Turn    int       `json:"turn,omitempty"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Seconds float64   `json:"seconds"`
	// Open: still going when the timeline was read.
	Open         bool    `json:"open,omitempty"`
	Spend        float64 `json:"spend,omitempty"`
	InputTokens  int     `json:"input_tokens,omitempty"`
	OutputTokens int     `json:"output_tokens,omitempty"`
	Error        bool    `json:"error,omitempty"`
	// Child is the thread a spawn call started.
	Child string `json:"child,omitempty"`
	// Seq is the transcript event the span starts at (the transcript page
	// anchors it as #ev-SEQ).
	Seq int64 `json:"seq"`
}

// buildTimeline places evs (one thread's events, in order) on a timeline;
// open says the thread has not finished, now is when it is read.
func buildTimeline(id string, evs []transcript.Event, open bool, now time.Time) *Timeline {
	tl := &Timeline{ThreadID: id, Open: open, Spans: []Span{}}
	if len(evs) == 0 {
		return tl
	}
	b := &timelineBuilder{tl: tl, turn: -1, waiting: -1, tools: map[string]int{}, approval: map[string]int{}}
	tl.Start = evs[0].Timestamp
	for _, ev := range evs {
		b.event(ev)
	}
	tl.End = b.mark
	if open && now.After(tl.End) {
		tl.End = now
	}
	b.closeTurn(tl.End)
	tl.settle(open)
	return tl
}

// timelineBuilder is what buildTimeline keeps between events: the spans
// still going are found again by index, so that the event that ends one
// can close it.
type timelineBuilder struct {
	tl       *Timeline
	mark     time.Time      // the last event's time (token deltas aside)
	turn     int            // index of the turn in flight, or -1
	waiting  int            // index of a wait that ends at the next event, or -1
	tools    map[string]int // the tool calls started and not answered, by call id
	approval map[string]int // the approvals requested and not decided, by call id
}

// add appends s to the timeline and is its index.
func (b *timelineBuilder) add(s Span) int {
	b.tl.Spans = append(b.tl.Spans, s)
	return len(b.tl.Spans) - 1
}

// closeTurn ends the turn in flight, if any, at at.
func (b *timelineBuilder) closeTurn(at time.Time) {
	if b.turn >= 0 {
		b.tl.Spans[b.turn].End = at
		b.turn = -1
	}
}

// inTurn is the turn number of the turn in flight (0 before the first),
// which every span but a turn's own is labelled with.
func (b *timelineBuilder) inTurn() int { return turnOf(b.tl, b.turn) }

// event places one event: a wait on children ends at the first event after
// it (its checkpoint aside), and each kind of event opens, closes or marks
// its span. Token deltas are not events of the timeline, and do not move
// its mark.
func (b *timelineBuilder) event(ev transcript.Event) {
	ts := ev.Timestamp
	if ev.Type == transcript.TypeTokenDelta {
		return
	}
	if b.waiting >= 0 && ev.Type != transcript.TypeCheckpoint {
		b.tl.Spans[b.waiting].End, b.waiting = ts, -1
	}
	switch ev.Type {
	case transcript.TypeCognitionOut:
		b.modelCall(ev)
	case transcript.TypeToolCallStart:
		p := transcript.Payload[transcript.ToolCallStart](ev)
		b.tools[p.CallID] = b.add(Span{Kind: SpanTool, Label: p.Tool, Turn: b.inTurn(), Start: ts, End: ts, Open: true, Seq: ev.Seq})
	case transcript.TypeToolCallResult:
		b.toolResult(ev)
	case transcript.TypeChildSpawned:
		p := transcript.Payload[transcript.ChildSpawned](ev)
		if i := spawner(b.tl.Spans, max(b.turn, 0)); i >= 0 {
			b.tl.Spans[i].Child = p.ChildID
		}
	case transcript.TypeThreadWaiting:
		p := transcript.Payload[transcript.ThreadWaiting](ev)
		n := len(p.ChildIDs)
		b.waiting = b.add(Span{Kind: SpanWait, Label: fmt.Sprintf("waiting on %d thread%s", n, plural(n)), Turn: b.inTurn(),
			Start: ts, End: ts, Open: true, Seq: ev.Seq})
	case transcript.TypeApprovalRequested:
		p := transcript.Payload[transcript.ApprovalRequested](ev)
		b.approval[p.CallID] = b.add(Span{Kind: SpanApproval, Label: "approval of " + p.Tool, Turn: b.inTurn(),
			Start: ts, End: ts, Open: true, Seq: ev.Seq})
	case transcript.TypeApprovalDecided:
		b.approvalDecided(ev)
	case transcript.TypeThreadError:
		p := transcript.Payload[transcript.Error](ev)
		b.add(Span{Kind: SpanError, Label: strings.TrimSpace("error " + p.Code + ": " + firstLine(p.Message, 120)), Turn: b.inTurn(),
			Start: ts, End: ts, Error: true, Seq: ev.Seq})
	case transcript.TypeUserMessage:
		b.add(messageSpan(ev, b.inTurn()))
	}
	b.mark = ts
}

// modelCall opens a turn and places its model call, both from the event
// before the answer (the thread's first event's time for the first) to the
// answer; the turn in flight ends where this one starts. A continuation's
// reconstructed history (turn 0) made no call and places nothing.
func (b *timelineBuilder) modelCall(ev transcript.Event) {
	var p transcript.CognitionOut
	if ev.Decode(&p) != nil || p.Turn == 0 {
		return
	}
	ts := ev.Timestamp
	start := b.mark
	if start.IsZero() {
		start = ts
	}
	b.closeTurn(start)
	b.tl.Turns++
	b.tl.Spend += p.Spend
	b.turn = b.add(Span{Kind: SpanTurn, Label: "turn " + strconv.Itoa(p.Turn), Turn: p.Turn, Start: start, Spend: p.Spend,
		InputTokens: p.Usage.InputTokens, OutputTokens: p.Usage.OutputTokens, Seq: ev.Seq})
	label := "model call"
	if p.Model != "" {
		label = p.Model
	}
	if n := len(p.ToolCalls); n > 0 {
		label += fmt.Sprintf(" → %d tool call%s", n, plural(n))
	}
	b.add(Span{Kind: SpanModel, Label: label, Turn: p.Turn, Start: start, End: ts, Spend: p.Spend,
		InputTokens: p.Usage.InputTokens, OutputTokens: p.Usage.OutputTokens, Seq: ev.Seq})
}

// toolResult ends the tool call the result answers, or places it as an
// instant when it never started (denied, or not run after an interrupt).
// The span then points at the result, which the transcript page shows,
// not at the start.
func (b *timelineBuilder) toolResult(ev transcript.Event) {
	p := transcript.Payload[transcript.ToolCallResult](ev)
	ts := ev.Timestamp
	i, ok := b.tools[p.CallID]
	if !ok {
		i = b.add(Span{Kind: SpanTool, Label: p.Tool, Turn: b.inTurn(), Start: ts, Seq: ev.Seq})
	}
	delete(b.tools, p.CallID)
	b.tl.Spans[i].End, b.tl.Spans[i].Open, b.tl.Spans[i].Error, b.tl.Spans[i].Seq = ts, false, p.IsError, ev.Seq
}

// approvalDecided ends the wait for approval the decision answers, saying
// who decided what, and moves the gated tool call's start to the decision:
// the tool runs (or is answered) only once decided.
func (b *timelineBuilder) approvalDecided(ev transcript.Event) {
	p := transcript.Payload[transcript.ApprovalDecided](ev)
	ts := ev.Timestamp
	if j, ok := b.tools[p.CallID]; ok {
		b.tl.Spans[j].Start = ts
	}
	i, ok := b.approval[p.CallID]
	if !ok {
		return
	}
	s := &b.tl.Spans[i]
	s.End, s.Open, s.Error = ts, false, p.Decision != "approve"
	verb := "approved"
	if p.Decision != "approve" {
		verb = "denied"
	}
	s.Label += ": " + verb + " by " + p.By
	delete(b.approval, p.CallID)
}

// messageSpan is the instant of a person's message (or interrupt) sent
// during turn, labelled with who sent it and its first line.
func messageSpan(ev transcript.Event, turn int) Span {
	p := transcript.Payload[transcript.UserMessage](ev)
	label := "message"
	if p.Interrupted {
		label = "interrupt"
	}
	if p.By != "" {
		label += " from " + p.By
	}
	return Span{Kind: SpanMessage, Label: label + ": " + firstLine(p.Content, 80), Turn: turn, Start: ev.Timestamp, End: ev.Timestamp, Seq: ev.Seq}
}

// settle ends the spans once every event is placed: one still going runs
// to the timeline's end while the thread is open, and is closed where it
// started if the thread ended meanwhile (it was never answered); then
// every span has its seconds, and the timeline the wall time of its model
// calls, tool calls and waits.
func (tl *Timeline) settle(open bool) {
	var model, tool, wait []Span
	for i := range tl.Spans {
		s := &tl.Spans[i]
		if s.Open {
			if open {
				s.End = tl.End
			} else {
				s.Open = false
			}
		}
		if s.End.Before(s.Start) {
			s.End = s.Start
		}
		s.Seconds = s.End.Sub(s.Start).Seconds()
		switch s.Kind {
		case SpanModel:
			model = append(model, *s)
		case SpanTool:
			tool = append(tool, *s)
		case SpanWait, SpanApproval:
			wait = append(wait, *s)
		}
	}
	tl.ModelSeconds, tl.ToolSeconds, tl.WaitSeconds = wallSeconds(model), wallSeconds(tool), wallSeconds(wait)
}

// wallSeconds is the time during which at least one of spans runs: the
// length of the union of their intervals.
func wallSeconds(spans []Span) float64 {
	sort.Slice(spans, func(i, j int) bool { return spans[i].Start.Before(spans[j].Start) })
	var total time.Duration
	var from, to time.Time
	for i, s := range spans {
		switch {
		case i == 0:
			from, to = s.Start, s.End
		case s.Start.After(to):
			total += to.Sub(from)
			from, to = s.Start, s.End
		case s.End.After(to):
			to = s.End
		}
	}
	if len(spans) > 0 {
		total += to.Sub(from)
	}
	return total.Seconds()
}

// spawner is the index of the tool call, among spans[from:] (the turn in
// flight), that a child just spawned belongs to: the first call still
// running without a child, a spawning tool's before any other (a turn's
// calls start, and spawn, in order), or -1.
func spawner(spans []Span, from int) int {
	other := -1
	for i := from; i < len(spans); i++ {
		if s := spans[i]; s.Kind == SpanTool && s.Open && s.Child == "" {
			if strings.HasSuffix(s.Label, "/thread_directive") || strings.HasSuffix(s.Label, "/run_graph") {
				return i
			}
			if other < 0 {
				other = i
			}
		}
	}
	return other
}

// turnOf is the turn number of the turn in flight (0 before the first).
func turnOf(tl *Timeline, turn int) int {
	if turn < 0 {
		return 0
	}
	return tl.Spans[turn].Turn
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// firstLine is the first line of s, cut to at most n bytes (at a rune's
// start).
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

// SpendChart is the spend of a tree over time: every model call's charge
// of every thread in it (continuations included), cumulated.
type SpendChart struct {
	// Threads is how many threads of the tree the chart read; Skipped how
	// many it left out (past maxChartThreads, or whose transcript did not
	// read).
	Threads int          `json:"threads"`
	Skipped int          `json:"skipped,omitempty"`
	Start   time.Time    `json:"start"`
	End     time.Time    `json:"end"`
	Total   float64      `json:"total"`
	Ceiling float64      `json:"ceiling,omitempty"` // the tree's spend ceiling, when known
	Points  []SpendPoint `json:"points"`
}

// SpendPoint is one charge.
type SpendPoint struct {
	At         time.Time `json:"at"`
	ThreadID   string    `json:"thread_id"`
	Turn       int       `json:"turn"`
	Spend      float64   `json:"spend"`
	Cumulative float64   `json:"cumulative"`
}

// maxChartThreads bounds the transcripts a spend chart reads.
const maxChartThreads = 200

// addCharges adds the model calls of one thread's events.
func (c *SpendChart) addCharges(id string, evs []transcript.Event) {
	for _, ev := range evs {
		if ev.Type != transcript.TypeCognitionOut {
			continue
		}
		var p transcript.CognitionOut
		if ev.Decode(&p) != nil || p.Turn == 0 {
			continue
		}
		c.Points = append(c.Points, SpendPoint{At: ev.Timestamp, ThreadID: id, Turn: p.Turn, Spend: p.Spend})
	}
}

// finish sorts the charges by time and cumulates them.
func (c *SpendChart) finish(now time.Time, open bool) {
	sort.SliceStable(c.Points, func(i, j int) bool { return c.Points[i].At.Before(c.Points[j].At) })
	sum := 0.0
	for i := range c.Points {
		sum += c.Points[i].Spend
		c.Points[i].Cumulative = sum
	}
	c.Total = sum
	if len(c.Points) > 0 {
		if c.Start.IsZero() || c.Points[0].At.Before(c.Start) {
			c.Start = c.Points[0].At
		}
		if last := c.Points[len(c.Points)-1].At; last.After(c.End) {
			c.End = last
		}
	}
	if open && now.After(c.End) {
		c.End = now
	}
}

// Drawing: the waterfall's bars are SVGs whose x and width are percents of
// the row (no inline styles: the pages' CSP allows none); the spend chart
// is one SVG in a fixed viewBox.

// spanRow is a span with its bar's place on the row, in percent.
type spanRow struct {
	Span
	X, W   string
	Offset float64 // seconds from the thread's start
}

// rows lays out the spans.
func (tl *Timeline) rows() []spanRow {
	total := tl.End.Sub(tl.Start).Seconds()
	out := make([]spanRow, 0, len(tl.Spans))
	for _, s := range tl.Spans {
		r := spanRow{Span: s, X: "0", W: "0.4", Offset: s.Start.Sub(tl.Start).Seconds()}
		if total > 0 {
			r.X, r.W = pct2(r.Offset/total*100), pct2(math.Max(s.Seconds/total*100, 0.4))
		}
		out = append(out, r)
	}
	return out
}

func pct2(f float64) string { return strconv.FormatFloat(math.Min(100, math.Max(0, f)), 'f', 2, 64) }

// tick is an axis mark: its place (percent of the axis, or viewBox
// units) and label.
type tick struct {
	At    string
	Label string
}

// timeTicks marks about n round offsets over a span of total seconds.
func timeTicks(total float64, n int) []float64 {
	if total <= 0 {
		return []float64{0}
	}
	step := niceStep(total / float64(n))
	var out []float64
	for v := 0.0; v <= total*1.0001; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// offset renders seconds since the start, short.
func offset(sec float64) string {
	switch {
	case sec == 0:
		return "0"
	case sec < 0.01:
		return strconv.FormatFloat(sec*1000, 'f', 1, 64) + "ms"
	case sec < 1:
		return strconv.FormatFloat(math.Round(sec*1000), 'f', -1, 64) + "ms"
	case sec < 120:
		return strconv.FormatFloat(math.Round(sec*100)/100, 'f', -1, 64) + "s"
	case sec < 7200:
		return fmt.Sprintf("%dm%02ds", int(sec)/60, int(sec)%60)
	}
	return fmt.Sprintf("%dh%02dm", int(sec)/3600, int(sec)%3600/60)
}

// seconds renders a duration in seconds, short.
func seconds(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return strconv.FormatFloat(sec*1e6, 'f', 0, 64) + "µs"
	case d < time.Second:
		return strconv.FormatFloat(sec*1000, 'f', 1, 64) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(sec, 'f', 2, 64) + "s"
	}
	return d.Round(time.Second).String()
}

func (tl *Timeline) ticks() []tick {
	total := tl.End.Sub(tl.Start).Seconds()
	var out []tick
	for _, v := range timeTicks(total, 8) {
		at := "0"
		if total > 0 {
			at = pct2(v / total * 100)
		}
		out = append(out, tick{At: at, Label: offset(v)})
	}
	return out
}

// chartView is the spend chart laid out in its viewBox.
type chartView struct {
	W, H                   int
	Left, Right, Top, Base int // the plot area
	Line, Area             string
	Ceiling                string // y of the ceiling line, "" when off the chart or unknown
	XTicks, YTicks         []tick
	Dots                   []dot
}

type dot struct {
	X, Y  string
	Title string
}

func (c *SpendChart) view() chartView {
	v := chartView{W: 900, H: 260, Left: 70, Right: 880, Top: 16, Base: 226}
	total := c.End.Sub(c.Start).Seconds()
	top := c.Total
	if c.Ceiling > 0 && c.Ceiling <= 2*math.Max(c.Total, 1e-12) {
		top = math.Max(top, c.Ceiling)
	}
	if top <= 0 {
		top = 1e-6
	}
	ystep := niceStep(top / 4)
	ymax := math.Ceil(top/ystep-1e-9) * ystep
	if ymax <= 0 {
		ymax = ystep
	}
	xOf := func(t time.Time) float64 {
		if total <= 0 {
			return float64(v.Left)
		}
		return float64(v.Left) + t.Sub(c.Start).Seconds()/total*float64(v.Right-v.Left)
	}
	yOf := func(s float64) float64 { return float64(v.Base) - s/ymax*float64(v.Base-v.Top) }
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', 1, 64) }
	var line strings.Builder
	fmt.Fprintf(&line, "M%s,%s", f(float64(v.Left)), f(float64(v.Base)))
	for _, p := range c.Points {
		x := xOf(p.At)
		fmt.Fprintf(&line, " H%s V%s", f(x), f(yOf(p.Cumulative)))
		v.Dots = append(v.Dots, dot{X: f(x), Y: f(yOf(p.Cumulative)),
			Title: fmt.Sprintf("%s turn %d: +$%.6f (total $%.6f)", p.ThreadID, p.Turn, p.Spend, p.Cumulative)})
	}
	fmt.Fprintf(&line, " H%s", f(float64(v.Right)))
	v.Line = line.String()
	v.Area = v.Line + fmt.Sprintf(" V%s Z", f(float64(v.Base)))
	if c.Ceiling > 0 && c.Ceiling <= ymax {
		v.Ceiling = f(yOf(c.Ceiling))
	}
	for _, s := range timeTicks(total, 6) {
		x := float64(v.Left)
		if total > 0 {
			x += s / total * float64(v.Right-v.Left)
		}
		v.XTicks = append(v.XTicks, tick{At: f(x), Label: offset(s)})
	}
	for s := 0.0; s <= ymax*1.0001; s += ystep {
		v.YTicks = append(v.YTicks, tick{At: f(yOf(s)), Label: usdShort(s)})
	}
	return v
}

// usdShort renders an axis amount with as few digits as it needs.
func usdShort(f float64) string {
	if f == 0 {
		return "$0"
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if len(s) > 9 {
		s = strconv.FormatFloat(f, 'g', 3, 64)
	}
	return "$" + s
}

// timelineData is the timeline page.
type timelineData struct {
	Thread *spooltype.Record
	TL     *Timeline
	Rows   []spanRow
	Ticks  []tick
	Chart  *SpendChart
	View   chartView
	Live   bool
	// Warning says why the thread's transcript stops short.
	Warning string
}

// TimelineJSON is /api/threads/ID/timeline: the thread's waterfall and the
// spend over time of the tree under it.
type TimelineJSON struct {
	Timeline *Timeline  `json:"timeline"`
	Spend    SpendChart `json:"spend"`
	Warning  string     `json:"warning,omitempty"`
}

// timeline reads thread id's transcript and those of the tree under it.
func (m *Monitor) timeline(ctx context.Context, id string) (*timelineData, error) {
	v, err := m.threadView(ctx, id)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	evs, bad, err := m.transcripts.read(ctx, id)
	if err != nil {
		return nil, err
	}
	d := &timelineData{Thread: v.Thread, Live: v.Live, TL: buildTimeline(id, evs, !v.Thread.Status.Terminal() && bad == nil, now)}
	if bad != nil {
		d.Warning = bad.Error()
	}
	d.Rows, d.Ticks = d.TL.rows(), d.TL.ticks()
	c := &SpendChart{Start: d.TL.Start, Points: []SpendPoint{}}
	if v.Budget != nil {
		c.Ceiling = v.Budget.Max
	}
	var walk func(n *Node)
	walk = func(n *Node) {
		if n == nil {
			return
		}
		if c.Threads >= maxChartThreads {
			c.Skipped++
		} else if tevs, _, err := m.transcripts.read(ctx, n.ThreadID); err != nil {
			c.Skipped++
		} else {
			c.Threads++
			c.addCharges(n.ThreadID, tevs)
		}
		for _, k := range n.Children {
			walk(k)
		}
		walk(n.Continuation)
	}
	walk(v.Tree)
	c.finish(now, v.Live)
	d.Chart, d.View = c, c.view()
	return d, nil
}

func (m *Monitor) serveTimeline(w http.ResponseWriter, r *http.Request, id string) {
	d, err := m.timeline(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	m.render(w, r, http.StatusOK, m.pages.timeline, page{Title: "Timeline · " + d.Thread.Directive, Data: d})
}

func (m *Monitor) serveTimelineJSON(w http.ResponseWriter, r *http.Request, id string) {
	d, err := m.timeline(r.Context(), id)
	if m.lookupFailed(w, r, id, err) {
		return
	}
	writeJSON(w, http.StatusOK, TimelineJSON{Timeline: d.TL, Spend: *d.Chart, Warning: d.Warning})
}
