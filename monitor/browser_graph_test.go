package monitor_test

import (
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// graphFiles are the graph tests' additions to the test project: g/fan
// (a tool step, a loop of two gates taken three times, a foreach of
// children three at a time that keeps a failed item, two returns), g/broken
// (a tool step that fails, retried once, then fails the run), g/skip (a
// conditional edge past a node) and g/signoff (an approval node), with the foreach's directive g/item
// (scripts/tree.yaml: an item named wait* holds at t/gate, "bad" fails).
var graphFiles = map[string]string{
	".ai/config/agent/models.yaml": "tiers:\n  fast: script:scripts/tree.yaml\n",
	".ai/directives/g/item.md": "# item\n\n```xml\n<directive name=\"item\" version=\"1.0.0\">\n  <metadata>\n    <description>One item of a foreach.</description>\n" +
		"    <model tier=\"fast\" />\n    <limits turns=\"4\" spend=\"0.05\" />\n" +
		"    <permissions><execute><tool>rye/file-system/*</tool></execute><execute><tool>t/gate</tool></execute></permissions>\n  </metadata>\n" +
		"  <inputs><input name=\"item\" type=\"string\" required=\"true\">item</input><input name=\"gate\" type=\"string\" required=\"true\">gate</input></inputs>\n" +
		"  <outputs><output name=\"verdict\">verdict</output></outputs>\n</directive>\n```\n",
	".ai/graphs/g/fan.yaml": `version: "1.0.0"
description: plan, warm up three times, review each item in a child, triage
permissions:
  - rye.execute.tool.rye.file-system.*
  - rye.execute.tool.t.gate
  - rye.execute.directive.g.*
limits: {spend: 1.0, max_steps: 40}
inputs:
  type: object
  required: [items, gate]
  properties:
    items: {type: array, items: {type: string}}
    gate: {type: string}
config:
  start: plan
  state: {ticks: ""}
  nodes:
    plan:
      action: {tool: rye/file-system/fs_write, params: {path: plan.md, content: "${inputs.items | length} items"}}
      next: warm
    warm:
      type: gate
      next: tick
    tick:
      type: gate
      assign: {ticks: "${state.ticks}x"}
      next:
        - when: {path: state.ticks, op: ne, value: "xxx"}
          to: warm
        - to: fan
    fan:
      type: foreach
      over: "${inputs.items}"
      as: item
      parallel: true
      max_concurrency: 3
      on_item_error: continue
      action:
        directive: g/item
        inputs: {item: "${item}", gate: "${inputs.gate}"}
      collect: results
      assign: {failed: "${result.failed}"}
      next:
        - when: {path: state.failed, op: gt, value: 0}
          to: triage
        - to: done
    triage:
      type: return
      output: {failed: "${state.failed}", results: "${state.results | length}"}
    done:
      type: return
      output: {ok: true}
`,
	".ai/graphs/g/broken.yaml": `version: "1.0.0"
description: fails at read, after one retry
permissions:
  - rye.execute.tool.rye.file-system.*
config:
  start: plan
  nodes:
    plan:
      action: {tool: rye/file-system/fs_write, params: {path: notes.md, content: "notes"}}
      assign: {planned: true}
      next: read
    read:
      action: {tool: rye/file-system/fs_read, params: {path: missing.md}}
      retry: {attempts: 2, backoff: 100ms}
      assign: {text: "${result.text}"}
      next: done
    done:
      type: return
      output: {text: "${state.text}"}
`,
	".ai/graphs/g/skip.yaml": skipGraph,
	".ai/graphs/g/signoff.yaml": `version: "1.0.0"
description: plan, then ask a person
permissions:
  - rye.execute.tool.rye.file-system.*
inputs:
  type: object
  properties:
    version: {type: string, default: "1.4.2"}
config:
  start: plan
  nodes:
    plan:
      action: {tool: rye/file-system/fs_write, params: {path: release.md, content: "release ${inputs.version}"}}
      assign: {version: "${inputs.version}"}
      next: sign_off
    sign_off:
      type: approval
      prompt: "Deploy ${state.version} to production?"
      show: {version: "${state.version}", notes: release.md}
      next:
        - when: {path: result.approved, op: eq, value: true}
          to: ship
        - to: abandon
    ship:
      type: return
      output: {shipped: "${state.version}"}
    abandon:
      type: return
      output: {shipped: false}
`,
}

// skipGraph is g/skip (testdata/graphs/skip.yaml): check's state says
// healthy, so decide's conditional edge goes straight to probe, past
// degraded, which the run never reaches.
var skipGraph = testdataFile("testdata/graphs/skip.yaml")

// testdataFile is the text of the file at path, read when the tests
// start.
func testdataFile(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// diagramProblems is a script that checks the page's graph diagram as
// the browser drew it: every edge's path, sampled every 2px along its
// length, stays out of every node's box and every edge label's box (its
// own nodes' too: it only touches them at its ends), and no label
// overlaps a node or another label. It lists what it found.
const diagramProblems = `(() => {
	const svg = document.querySelector("svg.graph");
	if (!svg) return ["no diagram"];
	const nodes = Array.from(svg.querySelectorAll("g.gnode")).map(g => {
		const r = g.querySelector("rect.box");
		return {what: "node " + g.dataset.node, x: +r.getAttribute("x"), y: +r.getAttribute("y"), w: +r.getAttribute("width"), h: +r.getAttribute("height")};
	});
	const labels = Array.from(svg.querySelectorAll("text.elabel")).map(t => {
		const b = t.getBBox();
		return {what: "label " + t.textContent, x: b.x, y: b.y, w: b.width, h: b.height};
	});
	const inside = (p, b) => p.x > b.x + 1 && p.x < b.x + b.w - 1 && p.y > b.y + 1 && p.y < b.y + b.h - 1;
	const overlap = (a, b) => a.x < b.x + b.w && b.x < a.x + a.w && a.y < b.y + b.h && b.y < a.y + a.h;
	const out = new Set();
	for (const path of svg.querySelectorAll("path.edge")) {
		const what = path.querySelector("title").textContent;
		const len = path.getTotalLength();
		for (let s = 0; s <= len; s += 2) {
			const p = path.getPointAtLength(s);
			for (const b of nodes.concat(labels)) {
				if (inside(p, b)) out.add(what + " passes through " + b.what);
			}
		}
	}
	labels.forEach((a, i) => nodes.concat(labels.slice(i + 1)).forEach(b => { if (overlap(a, b)) out.add(a.what + " overlaps " + b.what); }));
	return Array.from(out);
})()`

// requireDiagramClear fails the test with what diagramProblems found on
// the page.
func requireDiagramClear(t *testing.T, page *tab, what string) {
	t.Helper()
	var problems []string
	page.eval(diagramProblems, &problems)
	require.Empty(t, problems, "the diagram of %s", what)
}

// startGraph starts a root run of graph with inputs.
func (e *env) startGraph(name string, inputs map[string]any) *registry.Record {
	e.t.Helper()
	rec, err := e.orch.Start(e.t.Context(), orchestrator.StartRequest{Graph: true, Directive: name, Inputs: inputs, Bundle: e.bundle})
	require.NoError(e.t, err)
	return rec
}

// TestBrowserGraphRun drives headless Chromium through graph runs: a
// running foreach (its diagram with the loop taken three times and the
// node in flight, its progress bar of done, failed, running and not
// started items with a link to each child, the node table), cancelled
// through its confirmation (its cancelled items counted as cancelled,
// requireCancelledForeach); a failed run (its error, the failed node,
// the retry, the state after a step, a fork at a step, a resume from
// another node through its confirmation, followed to its end); an
// approval node approved in the page; graph runs in the thread list with
// their kind and node. Each page is screenshotted to $SPOOL_TEST_ARTIFACTS (default
// $TMPDIR/spool-test-artifacts): monitor-graph-foreach-running.png,
// monitor-graph-foreach-cancelled.png, monitor-graph-failed.png,
// monitor-graph-approval.png.
func TestBrowserGraphRun(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	e := setup(t, envOptions{files: graphFiles})
	br := startBrowser(t, bin)
	page := br.newTab()

	// A running foreach: one item done, one failed, three at the gate,
	// one not started.
	fan := e.startGraph("g/fan", map[string]any{"items": []string{"ok", "bad", "wait-a", "wait-b", "wait-c", "wait-d"}, "gate": e.gate})
	page.navigate(e.srv.URL + threadURL(fan.ThreadID))
	page.waitTrue(45*time.Second, "the foreach in flight", `document.getElementById("live").dataset.running === "true" &&
		/^1 done · [34] running · 1 failed( · 1 not started)? of 6$/.test(document.querySelector("section.foreach[data-node=fan] .counts-line").innerText.trim()) &&
		document.querySelectorAll("section.foreach[data-node=fan] ol.children .badge.st-running").length === 3 &&
		document.querySelector("svg.graph g.gnode.current[data-node=fan]") !== null`)
	// The record's progress is as live as the page's: the two settled
	// items are durable within a second or so, while the run, held by
	// its running children, has not suspended.
	require.Eventually(t, func() bool {
		rec, err := e.orch.Record(t.Context(), fan.ThreadID)
		return err == nil && rec.ItemsDone == 2
	}, 4*time.Second, 50*time.Millisecond, "the run's items_done follows its settled items")
	var diagram struct {
		Nodes, Taken, Back, Current int
		Visits                      []string
		Children                    int
		TickRow                     string
	}
	page.eval(`({
		Nodes: document.querySelectorAll("svg.graph g.gnode").length,
		Taken: document.querySelectorAll("svg.graph path.edge.taken").length,
		Back: document.querySelectorAll("svg.graph path.edge.back.taken").length,
		Current: document.querySelectorAll("svg.graph g.gnode.current").length,
		Visits: Array.from(document.querySelectorAll("svg.graph g.visits text")).map(t => t.textContent),
		Children: document.querySelectorAll("section.foreach[data-node=fan] ol.children a.tid").length,
		TickRow: document.querySelector("table.nodes tr[data-node=tick]").innerText,
	})`, &diagram)
	require.Equal(t, 6, diagram.Nodes)
	require.Equal(t, 1, diagram.Current)
	require.Equal(t, 1, diagram.Back, "the loop's way back, taken")
	require.Equal(t, 4, diagram.Taken, "plan→warm, warm→tick, tick→warm, tick→fan")
	require.ElementsMatch(t, []string{"×3", "×3"}, diagram.Visits, "warm and tick, three visits each")
	require.GreaterOrEqual(t, diagram.Children, 5, "the children started so far, each linked")
	require.Contains(t, diagram.TickRow, "completed")
	requireDiagramClear(t, page, "g/fan")
	shot := page.screenshotFull()
	saveArtifact(t, "monitor-graph-foreach-running.png", shot)

	// The list shows the run with its kind and node; a child's page is a
	// link away.
	list := br.newTab()
	list.navigate(e.srv.URL + "/")
	// Its spend is its subtree's, live: the item done spent something.
	list.waitTrue(30*time.Second, "the run in the list", `(() => { const a = document.querySelector("table.threads td:nth-child(2) a.tid[href='`+threadURL(fan.ThreadID)+`']");
		return a !== null && a.closest("td").innerText.includes("graph") && a.closest("td").innerText.includes("at fan") &&
			/^\$0\.\d{6}$/.test(a.closest("tr").querySelector("td:nth-child(6)").innerText) &&
			a.closest("tr").querySelector("td:nth-child(6)").innerText !== "$0.000000" })()`)

	// Cancel through the confirmation: the run and its waiting children.
	page.click(`#cancel`)
	page.waitTrue(30*time.Second, "the confirmation", `document.querySelector("h1").innerText === "Cancel this graph run?"`)
	page.click(`#confirm`)
	page.waitTrue(time.Minute, "the cancelled run", `document.querySelector(".head h1 .badge").textContent === "cancelled" &&
		document.querySelector("#resume") !== null &&
		document.querySelector("svg.graph g.gnode.n-cancelled[data-node=fan]") !== null`)
	require.Equal(t, thread.StatusCancelled, e.wait(fan.ThreadID)[fan.ThreadID].Status)
	requireCancelledForeach(t, e, page, fan.ThreadID)

	// A failed run: the error, the failed node, its retry.
	broken := e.startGraph("g/broken", nil)
	require.Equal(t, thread.StatusError, e.wait(broken.ThreadID)[broken.ThreadID].Status)
	page.navigate(e.srv.URL + threadURL(broken.ThreadID))
	page.waitTrue(30*time.Second, "the failed run", `document.querySelector(".errbox code").innerText === "node_error" &&
		document.querySelector("svg.graph g.gnode.n-error[data-node=read]") !== null &&
		document.querySelector("svg.graph path.edge.e-retry.taken") !== null &&
		document.querySelector("table.nodes tr[data-node=read]").innerText.includes("retried") &&
		document.querySelector("#resume") !== null`)
	requireDiagramClear(t, page, "g/broken")
	saveArtifact(t, "monitor-graph-failed.png", page.screenshotFull())
	// The state after step 1, then a fork from there.
	page.click(`table.steps tr:first-child a[href="?step=1#state"]`)
	page.waitTrue(30*time.Second, "the state after step 1", `document.querySelector("#state h2").innerText.includes("after step 1") &&
		document.querySelector("#state pre.state").innerText.includes('"planned": true') &&
		!document.querySelector("#state pre.state").innerText.includes('"_last_error"')`)
	page.click(`table.steps tr:first-child button.fork`)
	page.waitTrue(30*time.Second, "the fork's confirmation", `document.querySelector("h1").innerText === "Fork this graph run?"`)
	page.click(`#confirm`)
	page.waitTrue(30*time.Second, "the fork's page", `document.querySelector(".flash") !== null &&
		document.querySelector(".flash").innerText.startsWith("Forked `+broken.ThreadID+` at step 1 as ") &&
		document.querySelector(".head .links").innerText.includes("fork of `+broken.ThreadID+` at step 1")`)

	// Resume it from another node, through the confirmation: the
	// continuation run's page follows it to its end.
	page.navigate(e.srv.URL + threadURL(broken.ThreadID))
	page.waitTrue(30*time.Second, "the failed run's resume form", `document.querySelector("#resume") !== null`)
	page.do("choose the node", chromedp.SetValue(chromedp.CSS(`select[name=from]`), "done"))
	page.click(`#resume`)
	page.waitTrue(30*time.Second, "the resume's confirmation", `document.querySelector("h1").innerText === "Resume this graph run?" &&
		document.body.innerText.includes("goes on from")`)
	page.click(`#confirm`)
	page.waitTrue(time.Minute, "the continuation run completed", `document.querySelector(".flash") !== null &&
		document.querySelector(".flash").innerText.startsWith("Resumed `+broken.ThreadID+` as ") &&
		document.querySelector(".head h1 .badge").textContent === "completed" &&
		document.querySelector(".head .links").innerText.includes("resumes `+broken.ThreadID+`")`)
	resumed := e.wait(broken.ThreadID)[broken.ThreadID]
	require.Equal(t, thread.StatusCompleted, resumed.Status, "%+v", resumed.Error)
	require.Equal(t, broken.ThreadID, resumed.ContinuationOf)

	// An approval node: decided in the page.
	signoff := e.startGraph("g/signoff", nil)
	page.navigate(e.srv.URL + threadURL(signoff.ThreadID))
	page.waitTrue(time.Minute, "the approval", `document.querySelector("section.pending article.approval.request p.prompt") !== null &&
		document.querySelector("section.pending article.approval.request p.prompt").innerText === "Deploy 1.4.2 to production?" &&
		document.querySelector("section.pending article.approval.request b.nodename").innerText === "sign_off" &&
		document.querySelector("section.pending table.show").innerText.includes("1.4.2") &&
		document.querySelector("section.pending pre.input") === null &&
		document.querySelector("svg.graph g.gnode.n-waiting.current[data-node=sign_off]") !== null`)
	requireDiagramClear(t, page, "g/signoff")
	saveArtifact(t, "monitor-graph-approval.png", page.screenshotFull())
	// The inbox words it as the run's request, readably.
	inbox := br.newTab()
	inbox.navigate(e.srv.URL + "/approvals")
	inbox.waitTrue(30*time.Second, "the run's request in the inbox", `document.querySelector("article.approval.request p.prompt").innerText === "Deploy 1.4.2 to production?" &&
		document.querySelector("article.approval.request p.of").innerText.startsWith("graph run ") &&
		!document.querySelector("main").innerText.includes("the model") &&
		document.querySelector("article.approval.request input.reason").placeholder.includes("result.reason")`)
	saveArtifact(t, "monitor-approvals-graph.png", inbox.screenshot())
	require.Empty(t, inbox.problems(), "errors in the inbox")
	page.typeInto(`section.pending input.reason`, "release notes read")
	page.typeInto(`section.pending input.by`, "ada")
	page.click(`section.pending button.approve`)
	page.waitTrue(time.Minute, "the approved run", `document.querySelector(".head h1 .badge").textContent === "completed" &&
		document.querySelector("svg.graph g.gnode.n-completed[data-node=ship]") !== null`)
	done := e.wait(signoff.ThreadID)[signoff.ThreadID]
	require.Equal(t, map[string]any{"shipped": "1.4.2"}, done.Outputs)

	require.Empty(t, page.problems(), "errors in the graph pages")
	require.Empty(t, list.problems(), "errors in the list")
}

// requireCancelledForeach checks the page of run, cancelled while its
// foreach g/fan had one item done, one failed and the others at the gate
// or not started, once the children the cancel stopped have ended: the
// run is cancelled and no longer "cancel requested"; the foreach's bar
// and counts tell its cancelled items apart from the failed one and from
// those never started; the steps table and the node table say the step
// was cancelled, with its items, not that it is in flight. Screenshotted
// to monitor-graph-foreach-cancelled.png.
func requireCancelledForeach(t *testing.T, e *env, page *tab, run string) {
	t.Helper()
	var kids []string
	page.eval(`Array.from(document.querySelectorAll("section.foreach[data-node=fan] ol.children li")).
		filter(li => !li.querySelector(".badge").textContent.includes("planned")).map(li => li.querySelector("a.tid").textContent)`, &kids)
	require.NotEmpty(t, kids)
	for id, rec := range e.wait(kids...) {
		require.True(t, rec.Status.Terminal(), "%s is %s", id, rec.Status)
	}
	page.navigate(e.srv.URL + threadURL(run))
	var got struct {
		Badges             []string
		Head, Counts, Step string
		Failed, Cancelled  float64
		Running            float64
		NodeRow            string
	}
	page.eval(`(() => {
		const f = document.querySelector("section.foreach[data-node=fan]");
		const w = c => { const r = f.querySelector("svg.progress rect." + c); return r ? +r.getAttribute("width") : -1; };
		const steps = Array.from(document.querySelectorAll("table.steps tbody tr"));
		return {
			Badges: Array.from(document.querySelectorAll(".head h1 .badge")).map(b => b.textContent),
			Head: f.querySelector("h2").innerText, Counts: f.querySelector(".counts-line").innerText.trim(),
			Step: steps[steps.length - 1].querySelector("td:nth-child(3)").innerText,
			Failed: w("p-failed"), Cancelled: w("p-cancelled"), Running: w("p-running"),
			NodeRow: document.querySelector("table.nodes tr[data-node=fan]").innerText,
		};
	})()`, &got)
	require.Equal(t, []string{"cancelled"}, got.Badges, "the run is cancelled, no longer cancel requested")
	require.Contains(t, got.Head, "cancelled")
	require.NotContains(t, got.Head, "in flight")
	require.Regexp(t, `^1 done · 0 running · 1 failed · [34] cancelled( · 1 not started)? of 6$`, got.Counts)
	require.InDelta(t, 100.0/6, got.Failed, 0.01, "one item failed")
	require.Greater(t, got.Cancelled, got.Failed, "the items the cancel stopped have a segment of their own")
	require.Zero(t, got.Running)
	require.Regexp(t, `^cancelled 1/6 done · 1 failed · [34] cancelled( · 1 not started)?$`, got.Step, "the steps table's foreach step")
	require.Contains(t, got.NodeRow, "cancelled")
	require.Contains(t, got.NodeRow, "1/6 done")
	saveArtifact(t, "monitor-graph-foreach-cancelled.png", page.screenshotFull())
}

// TestBrowserGraphLayout: a run that took decide's conditional edge past
// degraded to probe: the edge is drawn, taken, beside degraded and not
// through it, and no edge of the diagram passes through a node or a
// label, nor does any label cover another, as Chromium draws them.
// Screenshotted to monitor-graph-skip.png.
func TestBrowserGraphLayout(t *testing.T) {
	bin := findChromium(t)
	t.Parallel()
	e := setup(t, envOptions{files: graphFiles})
	br := startBrowser(t, bin)
	page := br.newTab()

	run := e.startGraph("g/skip", nil)
	require.Equal(t, thread.StatusCompleted, e.wait(run.ThreadID)[run.ThreadID].Status)
	page.navigate(e.srv.URL + threadURL(run.ThreadID))
	page.waitTrue(30*time.Second, "the completed run's diagram", `document.querySelector(".head h1 .badge").textContent === "completed" &&
		document.querySelector("svg.graph g.gnode.n-not_reached[data-node=degraded]") !== null &&
		document.querySelector("svg.graph g.gnode.n-completed[data-node=probe]") !== null`)
	var skip struct {
		Taken      bool
		Beside     bool
		LaneX      []float64
		DegradedX0 float64
		DegradedX1 float64
	}
	page.eval(`(() => {
		const path = Array.from(document.querySelectorAll("svg.graph path.edge")).find(p => p.querySelector("title").textContent.startsWith("decide → probe"));
		const r = document.querySelector("svg.graph g.gnode[data-node=degraded] rect.box");
		const x0 = +r.getAttribute("x"), x1 = x0 + +r.getAttribute("width"), y0 = +r.getAttribute("y"), y1 = y0 + +r.getAttribute("height");
		const xs = [];
		for (let s = 0; s <= path.getTotalLength(); s += 1) {
			const p = path.getPointAtLength(s);
			if (p.y >= y0 && p.y <= y1) xs.push(p.x);
		}
		return {Taken: path.classList.contains("taken"), Beside: xs.length > 0 && xs.every(x => x < x0 || x > x1), LaneX: xs.slice(0, 3), DegradedX0: x0, DegradedX1: x1};
	})()`, &skip)
	require.True(t, skip.Taken, "decide → probe is the edge the run took")
	require.True(t, skip.Beside, "decide → probe passes degraded's layer beside it: %+v", skip)
	requireDiagramClear(t, page, "g/skip")
	saveArtifact(t, "monitor-graph-skip.png", page.screenshotFull())
	require.Empty(t, page.problems(), "errors in the page")
}
