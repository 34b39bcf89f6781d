package monitor_test

import (
	"bytes"
	"image"
	"image/png"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestBrowserThreadView drives a real headless Chromium through the monitor
// while a tree runs on an in-process worker: the root's thread view shows
// the waiting root, its branches and the running leaves and is
// screenshotted; a leaf's transcript page and the root's page then follow
// the tree to its end without a reload.
//
// The screenshot goes to $SPOOL_TEST_ARTIFACTS (default
// $TMPDIR/spool-test-artifacts), and to docs/monitor.png with
// SPOOL_UPDATE_SCREENSHOT=1.
func TestBrowserThreadView(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	e := setup(t, envOptions{latency: 300 * time.Millisecond})
	root := e.startTree()
	br := startBrowser(t, bin)
	tr := e.waitTreeHeld(root.ThreadID)

	// The thread view of the running tree.
	page := br.newTab()
	page.navigate(e.srv.URL + threadURL(root.ThreadID))
	page.waitTrue(30*time.Second, "the running tree", `document.querySelectorAll("ul.tree a.tid").length === 5 &&
		document.querySelectorAll("ul.tree .badge.st-running").length === 2 &&
		document.querySelectorAll("ul.tree .badge.st-waiting").length === 3`)
	var heading string
	page.eval(`document.querySelector(".head h1").innerText`, &heading)
	require.Contains(t, heading, "t/root")
	require.Contains(t, heading, "waiting")
	var links []string
	page.eval(`Array.from(document.querySelectorAll("ul.tree a.tid")).map(a => a.textContent)`, &links)
	want := []string{root.ThreadID, tr.branches[0].ThreadID, tr.branches[1].ThreadID, tr.leaves[0].ThreadID, tr.leaves[1].ThreadID}
	require.ElementsMatch(t, want, links)
	var styled bool // the embedded stylesheet applied under the page's CSP
	page.eval(`getComputedStyle(document.querySelector("header.top")).display === "flex"`, &styled)
	require.True(t, styled, "monitor.css did not apply")

	shot := page.screenshot()
	checkPNG(t, shot, 1280, 900)
	saveArtifact(t, "monitor-thread-running.png", shot)
	if os.Getenv("SPOOL_UPDATE_SCREENSHOT") == "1" {
		require.NoError(t, os.MkdirAll(filepath.Join("..", "docs"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join("..", "docs", "monitor.png"), shot, 0o644))
		t.Log("updated docs/monitor.png")
	}

	// A leaf's transcript, open while the leaf waits at its gate.
	leaf := tr.leaves[0]
	transcriptTab := br.newTab()
	transcriptTab.navigate(e.srv.URL + threadURL(leaf.ThreadID) + "/transcript")
	transcriptTab.waitTrue(30*time.Second, "the leaf's first turn", `document.querySelectorAll("#events article.ev").length >= 3 &&
		document.getElementById("follow").innerText.includes("following")`)
	var before int
	transcriptTab.eval(`document.querySelectorAll("#events article.ev").length`, &before)

	// Release the gate: both pages follow the tree to its end by
	// themselves.
	e.release()
	transcriptTab.waitTrue(time.Minute, "the leaf's transcript to its end", `document.getElementById("follow").innerText === "End of transcript." &&
		document.querySelector("#events article.ev-life.done") !== null &&
		document.getElementById("events").innerText.includes("leaf 1 done: released") &&
		document.querySelector("#status .badge").textContent === "completed"`)
	var after int
	transcriptTab.eval(`document.querySelectorAll("#events article.ev").length`, &after)
	require.Greater(t, after, before, "events were appended live")
	saveArtifact(t, "monitor-transcript.png", transcriptTab.screenshot())

	page.waitTrue(time.Minute, "the root's page to show the tree completed", `document.getElementById("live").dataset.running === "false" &&
		document.querySelectorAll("ul.tree .badge.st-completed").length === 5 &&
		document.querySelector(".head h1 .badge").textContent === "completed"`)
	require.Equal(t, thread.StatusCompleted, e.wait(root.ThreadID)[root.ThreadID].Status)
	saveArtifact(t, "monitor-thread-completed.png", page.screenshot())

	// The root's timeline: its waterfall and the spend of the whole tree.
	page.click(`.head .links a[href$="/timeline"]`)
	page.waitTrue(30*time.Second, "the timeline", `document.querySelectorAll("table.waterfall tbody tr").length === 10 &&
		document.querySelectorAll("svg.chart circle.dot").length === 15 &&
		document.querySelector("svg.chart path.line").getBBox().width > 500`)
	saveArtifact(t, "monitor-timeline.png", page.screenshotFull())

	// The list page, and asynqmon's UI rendering from embedded assets.
	page.navigate(e.srv.URL + "/")
	page.waitTrue(30*time.Second, "the thread list", `document.querySelectorAll("table.threads tbody tr").length === 5`)
	saveArtifact(t, "monitor-list.png", page.screenshot())
	page.navigate(e.srv.URL + "/asynq/")
	page.waitTrue(30*time.Second, "asynqmon's queue table", `document.body.innerText.includes("`+e.keys.Queue("default")+`")`)
	saveArtifact(t, "monitor-asynqmon.png", page.screenshot())

	require.Empty(t, page.problems(), "errors in the thread and list pages")
	require.Empty(t, transcriptTab.problems(), "errors in the transcript page")
}

// checkPNG requires a well-formed PNG of the given size that is not blank:
// a rendered page has many colors.
func checkPNG(t *testing.T, b []byte, w, h int) {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(b))
	require.NoError(t, err, "screenshot is not a PNG")
	require.Equal(t, image.Rect(0, 0, w, h), img.Bounds())
	colors := map[[4]uint32]bool{}
	for y := 0; y < h; y += 3 {
		for x := 0; x < w; x += 3 {
			r, g, b, a := img.At(x, y).RGBA()
			colors[[4]uint32{r, g, b, a}] = true
		}
	}
	require.Greater(t, len(colors), 50, "the screenshot looks blank")
}

// saveArtifact writes a test artifact and logs where.
func saveArtifact(t *testing.T, name string, data []byte) {
	t.Helper()
	dir := os.Getenv("SPOOL_TEST_ARTIFACTS")
	if dir == "" {
		dir = filepath.Join(os.TempDir(), "spool-test-artifacts")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	p := filepath.Join(dir, name)
	require.NoError(t, os.WriteFile(p, data, 0o644))
	t.Logf("artifact %s (%d bytes)", p, len(data))
}
