package monitor_test

import (
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/monitor"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

const evil = `<script>alert('pwned')</script><b>bold</b>`

// threadURL is the monitor path of a thread (ids hold slashes, kept as
// separators).
func threadURL(id string) string { return "/threads/" + id }

// TestPlurals: a count of one reads in the singular on the monitor's
// pages: a graph run of one step in the list, its tree and its diagram's
// heading; a thread of one turn in its tree and record; one request
// waiting.
func TestPlurals(t *testing.T) {
	t.Parallel()
	one := "version: \"1.0.0\"\ndescription: one step\npermissions: [\"*\"]\nlimits: {max_steps: 1}\nconfig:\n  start: done\n  nodes:\n    done: {type: return}\n"
	e := setup(t, envOptions{files: map[string]string{".ai/graphs/g/one.yaml": one}})
	run := e.startGraph("g/one", nil)
	echo := e.start("t/echo", map[string]any{"text": "hello"})
	recs := e.wait(run.ThreadID, echo.ThreadID)
	require.Equal(t, 1, recs[run.ThreadID].Step)
	require.Equal(t, 1, recs[echo.ThreadID].Cost.Turns)

	list := e.page("/")
	require.Contains(t, list, `<span class="muted small">1 step</span>`)
	page := e.page(threadURL(run.ThreadID))
	require.Contains(t, page, `1 of 1 step`)
	require.Contains(t, page, `<span class="kind">graph</span> <span class="muted">1 step</span>`)
	page = e.page(threadURL(echo.ThreadID))
	require.Contains(t, page, `<span class="muted">1 turn · `)
	require.Contains(t, page, `<td>1 turn · `)
	for _, body := range []string{list, page} {
		require.NotRegexp(t, `\b1 (steps|turns|calls|requests|errors)\b`, body)
	}
}

func TestListPage(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	echo := e.start("t/echo", map[string]any{"text": "hello"})
	e.wait(echo.ThreadID)
	root := e.startTree()
	tr := e.waitTreeHeld(root.ThreadID)

	body := e.page("/")
	for _, id := range []string{echo.ThreadID, root.ThreadID, tr.branches[0].ThreadID, tr.leaves[1].ThreadID} {
		require.Contains(t, body, `href="/threads/`+id+`"`)
	}
	// Counts by status: 1 completed (echo), 3 waiting (root, branches), 2 running (leaves).
	require.Contains(t, body, `running <b>2</b>`)
	require.Contains(t, body, `waiting <b>3</b>`)
	require.Contains(t, body, `completed <b>1</b>`)
	require.Contains(t, body, `all <b>6</b>`)
	require.Contains(t, body, `data-running="true"`, "a running tree keeps the list live")

	// Filters.
	body = e.page("/?status=completed")
	require.Contains(t, body, echo.ThreadID)
	require.NotContains(t, body, root.ThreadID)
	body = e.page("/?directive=t/leaf")
	require.Contains(t, body, tr.leaves[0].ThreadID)
	require.Contains(t, body, tr.leaves[1].ThreadID)
	require.NotContains(t, body, `href="/threads/`+root.ThreadID+`"`)
	body = e.page("/?limit=1")
	require.Contains(t, body, "Showing the newest 1")

	// Tags, and the next page a link away.
	tagged := e.startTagged("t/echo", map[string]string{"customer": "42", "batch": "b1"})
	other := e.startTagged("t/echo", map[string]string{"customer": "7"})
	body = e.page("/?tag=" + url.QueryEscape("customer=42 batch=b1"))
	require.Contains(t, body, `href="/threads/`+tagged.ThreadID+`"`)
	require.NotContains(t, body, `href="/threads/`+other.ThreadID+`"`)
	require.Contains(t, body, `<span class="tag small">customer=42</span>`)
	require.Contains(t, body, `value="customer=42 batch=b1"`)
	body = e.page("/?limit=2")
	next := regexp.MustCompile(`<a class="next" href="([^"]+)">`).FindStringSubmatch(body)
	require.NotNil(t, next, "a next page link")
	body = e.page(html.UnescapeString(next[1]))
	require.Contains(t, body, "Showing the next 2")
	require.NotContains(t, body, `href="/threads/`+other.ThreadID+`"`, "the newest is on the first page")
	code, body, _ := e.get("/?tag=" + url.QueryEscape("nokey"))
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, "want key=value")
	e.requireStatus(http.StatusBadRequest, "/?cursor=zzz")

	// Newest first.
	body = e.page("/")
	require.Less(t, strings.Index(body, `href="/threads/`+tr.leaves[0].ThreadID), strings.Index(body, `href="/threads/`+echo.ThreadID))

	code, body, _ = e.get("/?status=bogus")
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, body, `status &#34;bogus&#34;`)
	e.requireStatus(http.StatusBadRequest, "/?limit=0")
}

func TestThreadPageTreeAndBudget(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	root := e.startTree()
	tr := e.waitTreeHeld(root.ThreadID)

	body := e.page(threadURL(root.ThreadID))
	require.Contains(t, body, `<span class="badge st-waiting">waiting</span>`)
	for _, r := range append(append([]*registry.Record{}, tr.branches...), tr.leaves...) {
		require.Contains(t, body, `href="/threads/`+r.ThreadID+`"`, "the tree shows %s", r.ThreadID)
	}
	require.Equal(t, 2, strings.Count(body, `<span class="badge st-running">running</span>`), "both leaves run")
	require.Contains(t, body, `data-running="true"`)
	require.Contains(t, body, "set aside for guaranteed children")
	require.Contains(t, body, `subtree $`, "each node shows its live subtree spend")
	require.Contains(t, body, `href="/threads/`+root.ThreadID+`/transcript"`)

	// The JSON view: the tree's shape and the ledger's reservations.
	var v monitor.ThreadView
	code, raw, _ := e.get("/api/threads/" + root.ThreadID)
	require.Equal(t, http.StatusOK, code, raw)
	require.NoError(t, json.Unmarshal([]byte(raw), &v))
	require.Equal(t, root.ThreadID, v.Thread.ThreadID)
	require.True(t, v.Live)
	require.Len(t, v.Tree.Children, 2)
	for _, b := range v.Tree.Children {
		require.Equal(t, thread.StatusWaiting, b.Status)
		require.Len(t, b.Children, 1)
		require.Equal(t, thread.StatusRunning, b.Children[0].Status)
	}
	require.NotNil(t, v.Budget)
	require.InDelta(t, 0.5, v.Budget.Max, 1e-9)
	require.Len(t, v.Budget.Children, 2)
	var kids float64
	for _, k := range v.Budget.Children {
		require.Equal(t, "active", k.Status)
		kids += k.Actual
		if k.Guaranteed {
			require.InDelta(t, 0.1, k.Max, 1e-9)
			require.InDelta(t, k.Max-k.Actual, v.Budget.Reserved, 1e-9, "what the guaranteed branch has not spent is set aside")
		}
	}
	require.Greater(t, kids, 0.0)
	require.InDelta(t, v.Budget.Own+kids, v.Budget.Actual, 1e-9, "the root's spend is live: its own and its children's")

	// A branch's page names its parent.
	body = e.page(threadURL(tr.branches[0].ThreadID))
	require.Contains(t, body, `parent <a class="tid" href="/threads/`+root.ThreadID+`"`)

	// Once released, the tree completes and the views say so.
	e.release()
	final := e.wait(root.ThreadID)[root.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	code, raw, _ = e.get("/api/threads/" + root.ThreadID)
	require.Equal(t, http.StatusOK, code)
	v = monitor.ThreadView{}
	require.NoError(t, json.Unmarshal([]byte(raw), &v))
	require.False(t, v.Live)
	require.InDelta(t, 0, v.Budget.Reserved, 1e-12)
	total := 0.0
	var walk func(n *monitor.Node)
	walk = func(n *monitor.Node) {
		require.Equal(t, thread.StatusCompleted, n.Status)
		total += n.Spend
		for _, k := range n.Children {
			walk(k)
		}
	}
	walk(v.Tree)
	require.InDelta(t, total, v.Budget.Actual, 1e-9, "the root's ledger holds the whole tree's spend")
	body = e.page(threadURL(root.ThreadID))
	require.Contains(t, body, `data-running="false"`)
	require.NotContains(t, body, "st-running")

	// Unknown thread.
	code, body, _ = e.get(threadURL("t/nope-1-abc"))
	require.Equal(t, http.StatusNotFound, code)
	require.Contains(t, body, `thread &#34;t/nope-1-abc&#34; not found`)
	code, raw, _ = e.get("/api/threads/t/nope-1-abc")
	require.Equal(t, http.StatusNotFound, code)
	require.JSONEq(t, `{"error": "thread \"t/nope-1-abc\" not found"}`, raw)
}

func TestTranscriptEvents(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	root := e.startTree()
	tr := e.waitTreeHeld(root.ThreadID)
	leaf := tr.leaves[0].ThreadID
	api := "/api/threads/" + leaf + "/events"

	events := func(after string) monitor.Events {
		t.Helper()
		code, raw, h := e.get(api + after)
		require.Equal(t, http.StatusOK, code, raw)
		require.Equal(t, "application/json", h.Get("Content-Type"))
		var out monitor.Events
		require.NoError(t, json.Unmarshal([]byte(raw), &out))
		return out
	}
	// While the leaf waits at the gate: not done, its first turn shown.
	all := events("")
	require.Equal(t, thread.StatusRunning, all.Status)
	require.False(t, all.Done)
	require.NotEmpty(t, all.Events)
	for i, ev := range all.Events {
		require.Equal(t, int64(i+1), ev.Seq, "seqs from 1 without gaps")
	}
	n := all.Next
	require.Equal(t, all.Events[len(all.Events)-1].Seq, n)
	shown := ""
	for _, ev := range all.Events {
		shown += string(ev.HTML)
		if ev.Type == "checkpoint" || ev.Type == "token_delta" || ev.Type == "tool_call_start" {
			require.Empty(t, ev.HTML, "%s is not shown", ev.Type)
		}
	}
	require.Contains(t, shown, `<code class="tool">rye/file-system/fs_write</code>`)
	require.Contains(t, shown, "started t/leaf")
	require.NotContains(t, shown, "t/gate</code>")

	// after=N returns only what follows N.
	tail := events(fmt.Sprintf("?after=%d", n-2))
	require.Len(t, tail.Events, 2)
	require.Equal(t, n-1, tail.Events[0].Seq)
	require.Equal(t, n, tail.Next)
	none := events(fmt.Sprintf("?after=%d", n))
	require.Empty(t, none.Events)
	require.Equal(t, n, none.Next)

	// The page renders what there is and is set to follow from n.
	body := e.page(threadURL(leaf) + "/transcript")
	require.Contains(t, body, fmt.Sprintf(`data-after="%d"`, n))
	require.Contains(t, body, `data-done="false"`)
	require.Contains(t, body, `data-api="/api/threads/`+leaf+`/events"`)
	require.Contains(t, body, "following")

	// Released, the leaf completes: the events after n hold the rest.
	e.release()
	require.Equal(t, thread.StatusCompleted, e.wait(leaf)[leaf].Status)
	rest := events(fmt.Sprintf("?after=%d", n))
	require.True(t, rest.Done)
	require.Equal(t, thread.StatusCompleted, rest.Status)
	require.NotEmpty(t, rest.Events)
	require.Equal(t, n+1, rest.Events[0].Seq)
	var types []string
	for _, ev := range rest.Events {
		types = append(types, ev.Type)
	}
	require.Contains(t, types, "tool_call_result")
	require.Contains(t, types, "thread_completed")
	html := ""
	for _, ev := range rest.Events {
		html += string(ev.HTML)
	}
	require.Contains(t, html, `<code class="tool">t/gate</code>`)
	body = e.page(threadURL(leaf) + "/transcript")
	require.Contains(t, body, "End of transcript.")
	require.Contains(t, body, "leaf 1 done: released")

	code, raw, _ := e.get(api + "?after=-1")
	require.Equal(t, http.StatusBadRequest, code, raw)
	e.requireStatus(http.StatusNotFound, "/api/threads/t/nope-1-abc/events")
	e.requireStatus(http.StatusNotFound, "/threads/t/nope-1-abc/transcript")
}

func TestEscaping(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	rec := e.start("t/echo", map[string]any{"text": evil})
	final := e.wait(rec.ThreadID)[rec.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, evil, final.Outputs["html"], "the output holds the markup as given")

	for _, path := range []string{"/", threadURL(rec.ThreadID), threadURL(rec.ThreadID) + "/transcript"} {
		code, body, h := e.get(path)
		require.Equal(t, http.StatusOK, code, path)
		require.NotContains(t, body, "<script>alert", path)
		require.NotContains(t, body, "<b>bold", path)
		require.Contains(t, h.Get("Content-Security-Policy"), "script-src 'self'", path)
		if path != "/" {
			require.Contains(t, body, "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;", path)
		}
	}
	// The events endpoint's HTML is escaped too (JSON carries it as a
	// string, so decode first).
	code, raw, _ := e.get("/api/threads/" + rec.ThreadID + "/events")
	require.Equal(t, http.StatusOK, code)
	var evs monitor.Events
	require.NoError(t, json.Unmarshal([]byte(raw), &evs))
	var html string
	for _, ev := range evs.Events {
		html += string(ev.HTML)
	}
	require.Contains(t, html, "&lt;script&gt;")
	require.NotContains(t, html, "<script>")

	// A query string is escaped where the page repeats it.
	code, body, _ := e.get("/?directive=" + url.QueryEscape(`"><script>x()</script>`))
	require.Equal(t, http.StatusOK, code)
	require.NotContains(t, body, "<script>x()")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	rec := e.start("t/echo", map[string]any{"text": "x"})
	e.wait(rec.ThreadID)
	body := e.page("/metrics")
	require.Contains(t, body, `spool_threads{status="completed"} 1`)
	require.Contains(t, body, `spool_threads{status="running"} 0`)
	require.Contains(t, body, `asynq_queue_tasks{queue="default",state="pending"} 0`)
	require.Contains(t, body, `asynq_queue_paused{queue="default"} 0`)
	require.Contains(t, body, `spool_monitor_scrape_ok{part="queues"} 1`)
	require.NotContains(t, body, `queue="t`, "other namespaces' queues are left out")
	code, body, _ := e.get("/healthz")
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, "ok\n", body)
}

func TestAsynqmon(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	rec := e.start("t/echo", map[string]any{"text": "x"})
	e.wait(rec.ThreadID)

	code, body, h := e.get("/asynq/")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, "Asynq")
	require.Contains(t, body, `window.FLAG_ROOT_PATH="\/asynq"`)
	require.NotContains(t, body, "fonts.googleapis.com", "nothing is loaded from the internet")
	require.Equal(t, "text/html; charset=utf-8", h.Get("Content-Type"))
	code, _, _ = e.get("/asynq/queues/default") // a client-side route: the index again
	require.Equal(t, http.StatusOK, code)

	code, body, _ = e.get("/asynq/api/queues")
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, e.keys.Queue(queue.DefaultQueue))

	// A cross-site request cannot press asynqmon's buttons.
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, e.srv.URL+"/asynq/api/queues/"+e.keys.Queue(queue.DefaultQueue)+":pause", nil)
	require.NoError(t, err)
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	resp, err := e.srv.Client().Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
}

func TestStaticAssets(t *testing.T) {
	t.Parallel()
	e := setup(t, envOptions{})
	code, body, h := e.get("/static/monitor.js")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, h.Get("Content-Type"), "javascript")
	require.Contains(t, body, "dataset.api")
	code, _, h = e.get("/static/monitor.css")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, h.Get("Content-Type"), "text/css")
	page := e.page("/")
	require.NotContains(t, page, "http://", "the page references no other origin")
	require.NotContains(t, page, "https://")
}
