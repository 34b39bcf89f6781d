package monitor_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestBrowserOperator drives headless Chromium through what an operator
// does in the monitor: approve a gated call in the inbox (the thread
// completes), decide one from the webhook's one-time link, send a message
// to a running tree, pause and unpause it and cancel it, each through its
// confirmation (a screenshot of the paused root's page), read the
// thread list's errors and queue counts, and go from a thread to its task
// in asynqmon and back. Each view is screenshotted to
// $SPOOL_TEST_ARTIFACTS (default $TMPDIR/spool-test-artifacts).
func TestBrowserOperator(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	ctx := t.Context()

	var mu sync.Mutex
	links := map[string]string{} // thread id → approve link
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct {
			ThreadID   string `json:"thread_id"`
			ApproveURL string `json:"approve_url"`
		}
		if json.NewDecoder(r.Body).Decode(&msg) == nil {
			mu.Lock()
			links[msg.ThreadID] = msg.ApproveURL
			mu.Unlock()
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(receiver.Close)
	approvals := gatedApprovals + "notify:\n  url: " + receiver.URL + "\n  secret: browser-secret-0123456789\n  links: https://spool.example\n"
	e := setup(t, envOptions{latency: 100 * time.Millisecond, files: map[string]string{".ai/config/agent/approvals.yaml": approvals}})

	failed := e.start("t/fail", nil)
	gated := e.start("t/gated", map[string]any{"target": "prod"})
	linked := e.start("t/gated", map[string]any{"target": "staging"})
	e.waitRecord(gated.ThreadID, "waited for approval", waitingForApproval)
	e.waitRecord(linked.ThreadID, "waited for approval", waitingForApproval)
	require.Equal(t, thread.StatusError, e.wait(failed.ThreadID)[failed.ThreadID].Status)
	br := startBrowser(t, bin)
	page := br.newTab()

	// The inbox: both calls; approve the first with a reason.
	page.navigate(e.srv.URL + "/approvals")
	page.waitTrue(30*time.Second, "the inbox", `document.querySelectorAll("article.approval").length === 2 &&
		document.body.innerText.includes("t/deploy")`)
	saveArtifact(t, "monitor-approvals.png", page.screenshot())
	sel := `article.approval[data-thread="` + gated.ThreadID + `"] `
	page.typeInto(sel+`input.reason`, "checked the diff")
	page.typeInto(sel+`input.by`, "ada")
	page.click(sel + `button.approve`)
	page.waitTrue(30*time.Second, "the approval's outcome", `document.querySelector(".flash") !== null &&
		document.querySelector(".flash").innerText.includes("Approved call_1_1 of `+gated.ThreadID+` (by ada)")`)
	final := e.wait(gated.ThreadID)[gated.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, "after deploy: deployed to prod", final.Result)
	page.waitTrue(30*time.Second, "the inbox to drop the decided call", `document.querySelectorAll("article.approval").length === 1`)

	// Its timeline shows the wait for the decision, and who decided.
	page.navigate(e.srv.URL + threadURL(gated.ThreadID) + "/timeline")
	page.waitTrue(30*time.Second, "the approval in the timeline", `document.querySelector("tr.k-approval rect.b-approval") !== null &&
		document.querySelector("tr.k-approval td.what").innerText.includes("approval of t/deploy: approved by ada")`)
	saveArtifact(t, "monitor-timeline-approval.png", page.screenshot())

	// The one-time link, opened as its recipient would (no session).
	var link string
	require.True(t, waitFor(ctx, time.Minute, func() bool {
		mu.Lock()
		defer mu.Unlock()
		link = links[linked.ThreadID]
		return link != ""
	}))
	u, err := url.Parse(link)
	require.NoError(t, err)
	linkTab := br.newTab()
	linkTab.navigate(e.srv.URL + u.Path + "?" + u.RawQuery)
	linkTab.waitTrue(30*time.Second, "the decision page", `document.querySelector("h1").innerText === "Approve this tool call?" &&
		document.body.innerText.includes("staging")`)
	saveArtifact(t, "monitor-decide-link.png", linkTab.screenshot())
	linkTab.click(`#decide`)
	linkTab.waitTrue(30*time.Second, "the link's outcome", `document.querySelector("h1").innerText === "Done"`)
	require.Equal(t, "after deploy: deployed to staging", e.wait(linked.ThreadID)[linked.ThreadID].Result)

	// A running tree: send its root a message, then cancel it.
	root := e.startTree()
	e.waitTreeHeld(root.ThreadID)
	// While it runs the list follows new threads by itself (its filter
	// form, untouched, does not hold it).
	page.navigate(e.srv.URL + "/")
	page.waitTrue(30*time.Second, "the live list", `document.getElementById("live").dataset.running === "true" &&
		document.querySelector("a.tid[href='/threads/`+root.ThreadID+`']") !== null`)
	late := e.start("t/echo", map[string]any{"text": "late"})
	page.waitTrue(30*time.Second, "the new thread in the list", `document.querySelector("a.tid[href='/threads/`+late.ThreadID+`']") !== null`)
	page.navigate(e.srv.URL + threadURL(root.ThreadID))
	page.waitTrue(30*time.Second, "the actions", `document.querySelector("#actions textarea[name=message]") !== null &&
		document.querySelectorAll("ul.tree a.tid").length === 5`)
	page.typeInto(`#actions textarea[name=message]`, "please summarize when done")
	// The page polls every 200ms while the tree runs: what is typed stays
	// through five of its ticks (counted by wrapping setTimeout, which each
	// tick of the page's refresh calls to schedule the next).
	var wrapped bool
	page.eval(`(() => {
		window.spoolTicks = 0;
		const schedule = window.setTimeout;
		window.setTimeout = (f, ...rest) => schedule((...a) => { if (f.name === "refresh") { window.spoolTicks++ } f(...a) }, ...rest);
		return true })()`, &wrapped)
	page.waitTrue(30*time.Second, "five ticks of the page's refresh", `window.spoolTicks >= 5`)
	var typed string
	page.eval(`document.querySelector("#actions textarea[name=message]").value`, &typed)
	require.Equal(t, "please summarize when done", typed)
	shot := page.screenshot()
	checkPNG(t, shot, 1280, 900)
	saveArtifact(t, "monitor-thread-actions.png", shot)
	page.click(`#send`)
	page.waitTrue(30*time.Second, "the message's outcome", `document.querySelector(".flash") !== null &&
		document.querySelector(".flash").innerText.includes("Message 1 queued for `+root.ThreadID+`")`)

	// Pause the tree through its confirmation: the root shows paused and
	// offers Unpause; unpaused, it goes on.
	page.click(`#pause`)
	page.waitTrue(30*time.Second, "the pause's confirmation", `document.querySelector("h1").innerText === "Pause this thread?"`)
	saveArtifact(t, "monitor-confirm-pause.png", page.screenshot())
	require.False(t, e.waitRecord(root.ThreadID, "", func(*registry.Record) bool { return true }).PauseRequested,
		"pause requested before the confirmation")
	page.click(`#confirm`)
	page.waitTrue(30*time.Second, "the paused root", `document.querySelector(".flash") !== null &&
		document.querySelector(".head h1 .badge").textContent === "paused" && document.querySelector("#unpause") !== null`)
	var color string
	page.eval(`getComputedStyle(document.querySelector(".head h1 .badge")).backgroundColor`, &color)
	require.Equal(t, "rgb(16, 152, 173)", color, "paused has a colour of its own")
	require.Equal(t, thread.StatusPaused, e.waitRecord(root.ThreadID, "paused", func(r *registry.Record) bool {
		return r.Status == thread.StatusPaused
	}).Status)
	shot = page.screenshot()
	checkPNG(t, shot, 1280, 900)
	saveArtifact(t, "monitor-thread-paused.png", shot)
	page.click(`#unpause`)
	page.waitTrue(30*time.Second, "the unpause's confirmation", `document.querySelector("h1").innerText === "Unpause this thread?"`)
	page.click(`#confirm`)
	page.waitTrue(30*time.Second, "the unpaused root", `document.querySelector(".flash") !== null &&
		document.querySelector(".flash").innerText.includes("Unpaused `+root.ThreadID+`") && document.querySelector("#pause") !== null`)
	e.waitRecord(root.ThreadID, "unpaused", func(r *registry.Record) bool { return !r.PauseRequested && r.Status != thread.StatusPaused })

	page.click(`#cancel`)
	page.waitTrue(30*time.Second, "the confirmation", `document.querySelector("h1").innerText === "Cancel this thread?"`)
	saveArtifact(t, "monitor-confirm-cancel.png", page.screenshot())
	// Nothing is cancelled before the confirmation. (The root may be
	// running or waiting: the message sent above wakes it.)
	before := e.waitRecord(root.ThreadID, "", func(*registry.Record) bool { return true })
	require.False(t, before.CancelRequested, "cancel requested before the confirmation")
	require.Contains(t, []thread.Status{thread.StatusRunning, thread.StatusWaiting}, before.Status, "nothing before the confirmation")
	page.click(`#confirm`)
	page.waitTrue(30*time.Second, "the cancelled tree", `document.querySelector(".flash") !== null &&
		document.querySelector(".head h1 .badge").textContent === "cancelled"`)
	require.Equal(t, thread.StatusCancelled, e.wait(root.ThreadID)[root.ThreadID].Status)
	saveArtifact(t, "monitor-thread-cancelled.png", page.screenshot())

	// The list: the error column and asynq's counts beside the threads.
	page.navigate(e.srv.URL + "/")
	page.waitTrue(30*time.Second, "the list", `document.querySelector("td.err code") !== null &&
		document.getElementById("failed-why").innerText.includes("Threads in error: 1")`)
	var errCode string
	page.eval(`document.querySelector("a.tid[href='/threads/`+failed.ThreadID+`']").closest("tr").querySelector("td.err code").innerText`, &errCode)
	require.Equal(t, e.wait(failed.ThreadID)[failed.ThreadID].Error.Code, errCode)
	saveArtifact(t, "monitor-list-errors.png", page.screenshotFull())

	// From a thread to its task in asynqmon, and back by the bar.
	page.navigate(e.srv.URL + threadURL(gated.ThreadID))
	page.waitTrue(30*time.Second, "the thread page", `document.querySelector("a.asynq") !== null`)
	page.click(`a.asynq`)
	page.waitTrue(60*time.Second, "asynqmon's task page", `location.pathname.startsWith("/asynq/queues/") &&
		document.body.innerText.includes("`+gated.ThreadID+`") && document.body.innerText.includes("completed") &&
		document.querySelector("#spool-bar a.thread") !== null && !document.querySelector("#spool-bar a.thread").hidden`)
	saveArtifact(t, "monitor-asynqmon-task.png", page.screenshot())
	page.click(`#spool-bar a.thread`)
	page.waitTrue(30*time.Second, "back on the thread page", `location.pathname === "/threads/`+gated.ThreadID+`" &&
		document.querySelector(".head h1 .badge").textContent === "completed"`)

	require.Empty(t, linkTab.problems(), "errors in the decision page")
	require.Empty(t, page.problems(), "errors in the monitor's pages and asynqmon's")
}
