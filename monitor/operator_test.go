package monitor_test

import (
	"encoding/json"
	"html"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/monitor"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
)

// TestListErrorsAndQueues: the list shows each thread's error code and
// message, and asynq's counts of spool's queues beside the threads in
// error, saying why asynq's Failed is not that number.
func TestListErrorsAndQueues(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	failed := e.start("t/fail", nil)
	ok := e.start("t/echo", map[string]any{"text": "x"})
	recs := e.wait(failed.ThreadID, ok.ThreadID)
	f := recs[failed.ThreadID]
	require.Equal(t, thread.StatusError, f.Status)
	require.NotNil(t, f.Error)

	// A thread's record ends before asynq marks its task processed: read
	// the page once asynq has counted both tasks, so the row is settled.
	var info *asynq.QueueInfo
	require.Eventually(t, func() bool {
		var err error
		info, err = asynqInspector(e).GetQueueInfo(e.keys.Queue(queue.DefaultQueue))
		return err == nil && info.Processed >= 2
	}, 10*time.Second, 10*time.Millisecond)
	require.Equal(t, 0, info.Failed, "an errored thread's task is not a failed task")

	body := e.page("/")
	require.Contains(t, body, `<td class="err"><code>`+f.Error.Code+`</code>`)
	require.Contains(t, body, `<td class="err"></td>`, "a completed thread has no error")
	require.Contains(t, body, html.EscapeString(f.Error.Message[:min(len(f.Error.Message), 40)]))
	require.Contains(t, body, `Threads in error: <b>1</b>`)
	row := `<td><a href="/asynq/queues/` + e.keys.Queue(queue.DefaultQueue) + `">default</a></td>`
	require.Contains(t, body, row)
	i := strings.Index(body, row)
	require.Contains(t, body[i:], `<td class="num">`+itoa(info.Processed)+`</td><td class="num fail">0</td>`)
	require.Contains(t, body, "never as failed")
}

// TestTimelineViews: a tree's timeline page and JSON: the root's turns,
// model and tool calls with costs that add up to its record, and a spend
// chart whose total is the whole tree's spend.
func TestTimelineViews(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	root := e.startTree()
	e.waitTreeHeld(root.ThreadID)
	live := e.page(threadURL(root.ThreadID) + "/timeline")
	require.Contains(t, live, `data-running="true"`)
	require.Contains(t, live, "waiting on 2 threads")
	e.release()
	final := e.wait(root.ThreadID)[root.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status)

	var tl monitor.TimelineJSON
	code, raw, _ := e.get("/api/threads/" + root.ThreadID + "/timeline")
	require.Equal(t, http.StatusOK, code, raw)
	require.NoError(t, json.Unmarshal([]byte(raw), &tl))
	require.False(t, tl.Timeline.Open)
	require.Equal(t, final.Cost.Turns, tl.Timeline.Turns)
	require.InDelta(t, final.Cost.Spend, tl.Timeline.Spend, 1e-12, "the turns' costs add up to the record's")
	kinds := map[string]int{}
	for _, s := range tl.Timeline.Spans {
		kinds[s.Kind]++
		require.False(t, s.End.Before(s.Start), "%+v", s)
		require.False(t, s.Start.Before(tl.Timeline.Start), "%+v", s)
		require.False(t, s.End.After(tl.Timeline.End), "%+v", s)
	}
	require.Equal(t, map[string]int{"turn": 3, "model": 3, "tool": 3, "wait": 1}, kinds)

	// The chart reads the five threads; its total is the tree's spend.
	require.Equal(t, 5, tl.Spend.Threads)
	var v monitor.ThreadView
	_, raw, _ = e.get("/api/threads/" + root.ThreadID)
	require.NoError(t, json.Unmarshal([]byte(raw), &v))
	tree := 0.0
	var walk func(n *monitor.Node)
	walk = func(n *monitor.Node) {
		tree += n.Spend
		for _, k := range n.Children {
			walk(k)
		}
	}
	walk(v.Tree)
	require.InDelta(t, tree, tl.Spend.Total, 1e-12)
	require.Len(t, tl.Spend.Points, 3*5)
	require.InDelta(t, tree, tl.Spend.Points[len(tl.Spend.Points)-1].Cumulative, 1e-12)
	require.InDelta(t, 0.5, tl.Spend.Ceiling, 1e-12)

	page := e.page(threadURL(root.ThreadID) + "/timeline")
	require.Contains(t, page, `data-running="false"`)
	require.Contains(t, page, `<table class="waterfall">`)
	require.Equal(t, 10, strings.Count(page, `<rect class="bar b-`), "a bar per span")
	require.Contains(t, page, `<path class="line" d="M70.0,226.0 H`)
	require.Equal(t, 15, strings.Count(page, `<circle class="dot"`))
	require.Contains(t, page, `href="/threads/`+root.ThreadID+`/transcript#ev-`)
	require.Contains(t, e.page(threadURL(root.ThreadID)), `href="/threads/`+root.ThreadID+`/timeline"`)
	e.requireStatus(http.StatusNotFound, "/threads/t/nope-1-abc/timeline")
	e.requireStatus(http.StatusNotFound, "/api/threads/t/nope-1-abc/timeline")
}

// TestAsynqmonLinks: thread pages link to their task in asynqmon, the
// task's lookup works for ids with slashes, and asynqmon's pages load the
// script that links back.
func TestAsynqmonLinks(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	rec := e.start("t/echo", map[string]any{"text": "x"})
	e.wait(rec.ThreadID)
	q := e.keys.Queue(queue.DefaultQueue)

	page := e.page(threadURL(rec.ThreadID))
	task := "/asynq/queues/" + q + "/tasks/" + url.PathEscape(rec.ThreadID)
	require.Contains(t, task, "%2F", "the id is one escaped segment")
	require.Contains(t, page, `href="`+task+`"`)
	require.Contains(t, page, `asynq task</a> <span class="muted">(last activation completed)</span>`)

	for _, path := range []string{"/asynq/api/queues/" + q + "/tasks/" + url.PathEscape(rec.ThreadID), "/asynq/api/queues/" + q + "/tasks/" + rec.ThreadID} {
		code, raw, h := e.get(path)
		require.Equal(t, http.StatusOK, code, raw)
		require.Equal(t, "application/json", h.Get("Content-Type"))
		var info map[string]any
		require.NoError(t, json.Unmarshal([]byte(raw), &info))
		require.Equal(t, rec.ThreadID, info["id"])
		require.Equal(t, "completed", info["state"])
		require.Equal(t, q, info["queue"])
		require.Contains(t, info["payload"], `"thread_id":"`+rec.ThreadID+`"`)
	}
	e.requireStatus(http.StatusNotFound, "/asynq/api/queues/"+q+"/tasks/t/nope-1-abc")

	code, body, _ := e.get(task) // asynqmon's client-side route: its index
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `<script src="/static/asynqmon.js"></script></head>`)
	js := e.page("/static/asynqmon.js")
	require.Contains(t, js, "spool-bar")
	require.Contains(t, e.page("/static/asynqmon.css"), "#spool-bar")
}

func asynqInspector(e *env) *asynq.Inspector { return e.orch.Inspector() }

func itoa(n int) string { return strconv.Itoa(n) }
