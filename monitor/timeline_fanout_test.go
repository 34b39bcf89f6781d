package monitor

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestTimelineOfAFanOut: a turn that spawns twenty children at once (as
// in a fan-out, each spawn call running until its child ends) totals its
// tool calls' wall time, not their sum; each spawn row names its own
// child, and the page shows each child's whole id (the row's tool name
// may be cut, the id not).
func TestTimelineOfAFanOut(t *testing.T) {
	t.Parallel()
	const n = 20
	specs := []evSpec{
		{0, transcript.TypeThreadStarted, transcript.ThreadStarted{Directive: "f/root"}},
		{1 * ms, transcript.TypeCognitionIn, transcript.CognitionIn{Content: "go"}},
	}
	var calls []string
	for i := range n {
		calls = append(calls, fmt.Sprintf("c%d", i))
	}
	specs = append(specs, evSpec{1000 * ms, transcript.TypeCognitionOut, out(1, 0.001, calls...)})
	for i := range n {
		at := 1000*ms + time.Duration(i)*10*ms
		specs = append(specs,
			evSpec{at, transcript.TypeToolCallStart, transcript.ToolCallStart{CallID: calls[i], Tool: "rye/agent/threads/thread_directive"}},
			evSpec{at + 5*ms, transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: fmt.Sprintf("f/leaf-1795779197-kid%07d", i), Directive: "f/leaf"}})
	}
	// The children end 16 s later, one after the other.
	for i := range n {
		specs = append(specs, evSpec{17000*ms + time.Duration(i)*10*ms, transcript.TypeToolCallResult,
			transcript.ToolCallResult{CallID: calls[i], Tool: "rye/agent/threads/thread_directive", Output: "{}"}})
	}
	specs = append(specs, evSpec{18000 * ms, transcript.TypeCognitionOut, out(2, 0.001)},
		evSpec{18100 * ms, transcript.TypeThreadCompleted, transcript.ThreadCompleted{Status: "completed"}})
	tl := buildTimeline("f/root-1-a", events(t, specs...), false, t0.Add(time.Hour))

	require.InDelta(t, 16.19, tl.ToolSeconds, 1e-9, "the wall time of the spawns, from the first start to the last end")
	var kids []string
	for _, s := range tl.Spans {
		if s.Kind == SpanTool {
			kids = append(kids, s.Child)
		}
	}
	require.Len(t, kids, n)
	for i, k := range kids {
		require.Equal(t, fmt.Sprintf("f/leaf-1795779197-kid%07d", i), k, "spawn %d", i)
	}

	html := renderTimeline(t, tl)
	for _, k := range kids {
		link := `<a class="tid small" href="/threads/` + k + `">` + k + `</a>`
		require.Contains(t, html, link)
		at := strings.Index(html, link)
		cell := html[strings.LastIndex(html[:at], "<td"):at]
		require.NotContains(t, cell, ">rye/agent/threads/thread_directive<", "the id comes first in its row, whose end is cut")
	}
	require.Contains(t, html, " · tools 16.19s · ", "the summary's tool total is wall time")
}

// renderTimeline renders the timeline page of tl.
func renderTimeline(t *testing.T, tl *Timeline) string {
	t.Helper()
	p, err := loadPages()
	require.NoError(t, err)
	d := &timelineData{Thread: &registry.Record{ThreadID: tl.ThreadID, Directive: "f/root", Status: thread.StatusCompleted},
		TL: tl, Rows: tl.rows(), Ticks: tl.ticks(), Chart: &SpendChart{}}
	var b bytes.Buffer
	require.NoError(t, p.timeline.ExecuteTemplate(&b, "layout", page{Title: "t", Data: d}))
	return b.String()
}
