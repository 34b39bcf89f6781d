package monitor

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// events builds a transcript from (offset, type, payload) triples.
type evSpec struct {
	at      time.Duration
	typ     string
	payload any
}

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func events(t *testing.T, specs ...evSpec) []transcript.Event {
	t.Helper()
	out := make([]transcript.Event, 0, len(specs))
	for i, s := range specs {
		b, err := json.Marshal(s.payload)
		require.NoError(t, err)
		out = append(out, transcript.Event{Timestamp: t0.Add(s.at), ThreadID: "t/x-1-a", Seq: int64(i + 1), Type: s.typ, Payload: b})
	}
	return out
}

const ms = time.Millisecond

func out(turn int, spend float64, calls ...string) transcript.CognitionOut {
	p := transcript.CognitionOut{Turn: turn, Spend: spend, Model: "m", Usage: transcript.Usage{InputTokens: 100 * turn, OutputTokens: 10}}
	for _, c := range calls {
		p.ToolCalls = append(p.ToolCalls, thread.ToolCall{ID: c, Name: "tool"})
	}
	return p
}

// span is what the test compares: kind, label, start and end offsets.
type span struct {
	Kind, Label string
	From, To    time.Duration
	Open, Error bool
	Child       string
	Spend       float64
}

func spans(tl *Timeline) []span {
	var got []span
	for _, s := range tl.Spans {
		got = append(got, span{Kind: s.Kind, Label: s.Label, From: s.Start.Sub(t0), To: s.End.Sub(t0), Open: s.Open, Error: s.Error, Child: s.Child, Spend: s.Spend})
	}
	return got
}

func TestTimelineOfATree(t *testing.T) {
	t.Parallel()
	evs := events(t,
		evSpec{0, transcript.TypeThreadStarted, transcript.ThreadStarted{Directive: "t/x"}},
		evSpec{1 * ms, transcript.TypeCognitionIn, transcript.CognitionIn{Content: "go"}},
		evSpec{1000 * ms, transcript.TypeCognitionOut, out(1, 0.001, "c1")},
		evSpec{1100 * ms, transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: "c1", Tool: "rye/file-system/fs_write"}},
		evSpec{1600 * ms, transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: "c1", Tool: "rye/file-system/fs_write", Output: "ok"}},
		evSpec{1700 * ms, transcript.TypeCheckpoint, map[string]any{"segment": 1}},
		evSpec{3000 * ms, transcript.TypeCognitionOut, out(2, 0.002, "c2")},
		evSpec{3100 * ms, transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: "c2", Tool: "rye/agent/threads/thread_directive"}},
		evSpec{3200 * ms, transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: "t/kid-1-b", Directive: "t/kid"}},
		evSpec{3200 * ms, transcript.TypeThreadWaiting, transcript.ThreadWaiting{ChildIDs: []string{"t/kid-1-b"}}},
		evSpec{3300 * ms, transcript.TypeCheckpoint, map[string]any{"segment": 2}},
		evSpec{8000 * ms, transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: "c2", Tool: "rye/agent/threads/thread_directive", Output: "{}"}},
		evSpec{8200 * ms, transcript.TypeTokenDelta, transcript.TokenDelta{Text: "do"}},
		evSpec{9000 * ms, transcript.TypeCognitionOut, out(3, 0.004)},
		evSpec{9100 * ms, transcript.TypeThreadCompleted, transcript.ThreadCompleted{Status: "completed"}},
		evSpec{9200 * ms, transcript.TypeCheckpoint, map[string]any{"segment": 3}},
	)
	tl := buildTimeline("t/x-1-a", evs, false, t0.Add(time.Hour))
	want := []span{
		{Kind: SpanTurn, Label: "turn 1", From: 1 * ms, To: 1700 * ms, Spend: 0.001},
		{Kind: SpanModel, Label: "m → 1 tool call", From: 1 * ms, To: 1000 * ms, Spend: 0.001},
		{Kind: SpanTool, Label: "rye/file-system/fs_write", From: 1100 * ms, To: 1600 * ms},
		{Kind: SpanTurn, Label: "turn 2", From: 1700 * ms, To: 8000 * ms, Spend: 0.002},
		{Kind: SpanModel, Label: "m → 1 tool call", From: 1700 * ms, To: 3000 * ms, Spend: 0.002},
		{Kind: SpanTool, Label: "rye/agent/threads/thread_directive", From: 3100 * ms, To: 8000 * ms, Child: "t/kid-1-b"},
		{Kind: SpanWait, Label: "waiting on 1 thread", From: 3200 * ms, To: 8000 * ms},
		// The token delta is no event the model call starts after.
		{Kind: SpanTurn, Label: "turn 3", From: 8000 * ms, To: 9200 * ms, Spend: 0.004},
		{Kind: SpanModel, Label: "m", From: 8000 * ms, To: 9000 * ms, Spend: 0.004},
	}
	if d := cmp.Diff(want, spans(tl)); d != "" {
		t.Fatalf("spans (-want +got):\n%s", d)
	}
	require.Equal(t, 3, tl.Turns)
	require.InDelta(t, 0.007, tl.Spend, 1e-12)
	require.InDelta(t, 0.999+1.3+1.0, tl.ModelSeconds, 1e-9)
	require.InDelta(t, 0.5+4.9, tl.ToolSeconds, 1e-9)
	require.InDelta(t, 4.8, tl.WaitSeconds, 1e-9)
	require.Equal(t, t0, tl.Start)
	require.Equal(t, t0.Add(9200*ms), tl.End, "a finished thread's timeline ends at its last event")

	// The rows place each span on the thread's whole time.
	rows := tl.rows()
	require.Equal(t, "0.01", rows[0].X)
	require.Equal(t, "18.47", rows[0].W) // 1.699 s of 9.2 s
	require.Equal(t, "86.96", rows[7].X) // 8 s of 9.2 s
	var labels []string
	for _, tk := range tl.ticks() {
		labels = append(labels, tk.Label)
	}
	require.Equal(t, []string{"0", "2s", "4s", "6s", "8s"}, labels)
}

// TestTimelineOpenThread: a thread still running has its spans in flight
// end at the time of reading, marked open; an approval wait ends at its
// decision, a denied one marked as an error.
func TestTimelineOpenThread(t *testing.T) {
	t.Parallel()
	evs := events(t,
		evSpec{0, transcript.TypeThreadStarted, transcript.ThreadStarted{Directive: "t/x"}},
		evSpec{500 * ms, transcript.TypeCognitionOut, out(1, 0.001, "a", "b")},
		evSpec{600 * ms, transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: "a", Tool: "t/deploy"}},
		evSpec{600 * ms, transcript.TypeApprovalRequested, transcript.ApprovalRequested{CallID: "a", Tool: "t/deploy"}},
		evSpec{600 * ms, transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: "b", Tool: "t/deploy"}},
		evSpec{600 * ms, transcript.TypeApprovalRequested, transcript.ApprovalRequested{CallID: "b", Tool: "t/deploy"}},
		evSpec{700 * ms, transcript.TypeCheckpoint, map[string]any{"segment": 1}},
		evSpec{5000 * ms, transcript.TypeApprovalDecided, transcript.ApprovalDecided{CallID: "a", Tool: "t/deploy", Decision: "deny", By: "ada", Reason: "no"}},
		evSpec{5000 * ms, transcript.TypeUserMessage, transcript.UserMessage{Content: "hold on\nmore", By: "ada"}},
		evSpec{5100 * ms, transcript.TypeToolCallResult, transcript.ToolCallResult{CallID: "a", Tool: "t/deploy", Output: "denied: no", IsError: true}},
		evSpec{5200 * ms, transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: "x", Tool: "t/slow"}},
	)
	tl := buildTimeline("t/x-1-a", evs, true, t0.Add(6*time.Second))
	want := []span{
		{Kind: SpanTurn, Label: "turn 1", From: 0, To: 6000 * ms, Spend: 0.001},
		{Kind: SpanModel, Label: "m → 2 tool calls", From: 0, To: 500 * ms, Spend: 0.001},
		// A gated call's span starts at its decision, the wait for it is
		// the approval's.
		{Kind: SpanTool, Label: "t/deploy", From: 5000 * ms, To: 5100 * ms, Error: true},
		{Kind: SpanApproval, Label: "approval of t/deploy: denied by ada", From: 600 * ms, To: 5000 * ms, Error: true},
		{Kind: SpanTool, Label: "t/deploy", From: 600 * ms, To: 6000 * ms, Open: true},
		{Kind: SpanApproval, Label: "approval of t/deploy", From: 600 * ms, To: 6000 * ms, Open: true},
		{Kind: SpanMessage, Label: "message from ada: hold on", From: 5000 * ms, To: 5000 * ms},
		{Kind: SpanTool, Label: "t/slow", From: 5200 * ms, To: 6000 * ms, Open: true},
	}
	if d := cmp.Diff(want, spans(tl)); d != "" {
		t.Fatalf("spans (-want +got):\n%s", d)
	}
	require.True(t, tl.Open)
	require.Equal(t, t0.Add(6*time.Second), tl.End)
}

func TestSpendChart(t *testing.T) {
	t.Parallel()
	c := &SpendChart{Start: t0, Ceiling: 0.01}
	c.addCharges("t/root-1-a", events(t,
		evSpec{1 * time.Second, transcript.TypeCognitionOut, out(1, 0.001)},
		evSpec{9 * time.Second, transcript.TypeCognitionOut, out(2, 0.002)},
		evSpec{9 * time.Second, transcript.TypeCognitionOut, transcript.CognitionOut{Content: "reconstructed history: turn 0"}},
	))
	c.addCharges("t/kid-1-b", events(t, evSpec{4 * time.Second, transcript.TypeCognitionOut, out(1, 0.004)}))
	c.finish(t0.Add(time.Hour), false)
	var got []string
	for _, p := range c.Points {
		got = append(got, fmt.Sprintf("%s %s %.3f", p.ThreadID, p.At.Sub(t0), p.Cumulative))
	}
	require.Equal(t, []string{"t/root-1-a 1s 0.001", "t/kid-1-b 4s 0.005", "t/root-1-a 9s 0.007"}, got)
	require.InDelta(t, 0.007, c.Total, 1e-12)
	require.Equal(t, t0.Add(9*time.Second), c.End)

	v := c.view()
	require.Equal(t, "M70.0,226.0 H160.0 V205.0 H430.0 V121.0 H880.0 V79.0 H880.0", v.Line, "a step line through each charge")
	require.NotEmpty(t, v.Ceiling, "a ceiling within twice the spend is drawn")
	require.Len(t, v.Dots, 3)
	require.Equal(t, "$0", v.YTicks[0].Label)
	require.Equal(t, "$0.01", v.YTicks[len(v.YTicks)-1].Label)

	c.Ceiling = 1 // far above the spend: not drawn, the scale follows the spend
	require.Empty(t, c.view().Ceiling)
}

func TestSlashedTask(t *testing.T) {
	t.Parallel()
	for rest, want := range map[string][2]string{
		"queues/default/tasks/t/root-1-a":            {"default", "t/root-1-a"},
		"queues/ns.default/tasks/a/b/c-1-x@wake-3":   {"ns.default", "a/b/c-1-x@wake-3"},
		"queues/default/tasks/plain-1-a":             {},
		"queues/default/active_tasks/t/x":            {},
		"queues/a/b/tasks/t/x":                       {},
		"queue_stats":                                {},
		"queues/default/retry_tasks/t/root-1-a:run":  {},
		"queues/default/tasks/t/root-1-a/transcript": {"default", "t/root-1-a/transcript"},
	} {
		q, id, ok := slashedTask(rest)
		require.Equal(t, want[0] != "", ok, rest)
		require.Equal(t, want, [2]string{q, id}, rest)
	}
}

func TestDurationLabels(t *testing.T) {
	t.Parallel()
	for sec, want := range map[float64][2]string{
		0:         {"0", "0µs"},
		0.0004:    {"0.4ms", "400µs"},
		0.0206123: {"21ms", "20.6ms"},
		0.5:       {"500ms", "500.0ms"},
		3.5234:    {"3.52s", "3.52s"},
		95:        {"95s", "1m35s"},
		600:       {"10m00s", "10m0s"},
		7322:      {"2h02m", "2h2m2s"},
	} {
		require.Equal(t, want, [2]string{offset(sec), seconds(sec)}, "%v", sec)
	}
	require.Equal(t, 2.0, niceStep(1.3))
	require.Equal(t, 0.005, niceStep(0.0041))
	require.Equal(t, 10.0, niceStep(7))
}

func TestFirstLine(t *testing.T) {
	t.Parallel()
	require.Equal(t, "one", firstLine("  one\ntwo", 10))
	require.Equal(t, "héllo…", firstLine("héllo wörld", 6))
	require.Equal(t, "h…", firstLine("héllo", 2), "never half a rune")
}
