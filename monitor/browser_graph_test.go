package monitor_test

import (
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
// (a tool step that fails, retried once, then fails the run) and
// g/signoff (an approval node), with the foreach's directive g/item
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
// through its confirmation; a failed run (its error, the failed node,
// the retry, the state after a step, a fork at a step, a resume from
// another node through its confirmation, followed to its end); an
// approval node approved in the page; graph runs in the thread list with
// their kind and node. Each of the three
// is screenshotted to $SPOOL_TEST_ARTIFACTS (default
// $TMPDIR/spool-test-artifacts): monitor-graph-foreach-running.png,
// monitor-graph-failed.png, monitor-graph-approval.png.
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
	shot := page.screenshotFull()
	saveArtifact(t, "monitor-graph-foreach-running.png", shot)

	// The list shows the run with its kind and node; a child's page is a
	// link away.
	list := br.newTab()
	list.navigate(e.srv.URL + "/")
	list.waitTrue(30*time.Second, "the run in the list", `(() => { const a = document.querySelector("table.threads td:nth-child(2) a.tid[href='`+threadURL(fan.ThreadID)+`']");
		return a !== null && a.closest("td").innerText.includes("graph") && a.closest("td").innerText.includes("at fan") })()`)

	// Cancel through the confirmation: the run and its waiting children.
	page.click(`#cancel`)
	page.waitTrue(30*time.Second, "the confirmation", `document.querySelector("h1").innerText === "Cancel this graph run?"`)
	page.click(`#confirm`)
	page.waitTrue(time.Minute, "the cancelled run", `document.querySelector(".head h1 .badge").textContent === "cancelled" &&
		document.querySelector("#resume") !== null &&
		document.querySelector("svg.graph g.gnode.n-cancelled[data-node=fan]") !== null`)
	require.Equal(t, thread.StatusCancelled, e.wait(fan.ThreadID)[fan.ThreadID].Status)

	// A failed run: the error, the failed node, its retry.
	broken := e.startGraph("g/broken", nil)
	require.Equal(t, thread.StatusError, e.wait(broken.ThreadID)[broken.ThreadID].Status)
	page.navigate(e.srv.URL + threadURL(broken.ThreadID))
	page.waitTrue(30*time.Second, "the failed run", `document.querySelector(".errbox code").innerText === "node_error" &&
		document.querySelector("svg.graph g.gnode.n-error[data-node=read]") !== null &&
		document.querySelector("svg.graph path.edge.e-retry.taken") !== null &&
		document.querySelector("table.nodes tr[data-node=read]").innerText.includes("retried") &&
		document.querySelector("#resume") !== null`)
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
	page.waitTrue(time.Minute, "the approval", `document.querySelector("section.pending article.approval code.tool") !== null &&
		document.querySelector("section.pending article.approval code.tool").innerText === "graph:approval" &&
		document.querySelector("section.pending pre.input").innerText.includes("Deploy 1.4.2 to production?") &&
		document.querySelector("svg.graph g.gnode.n-waiting.current[data-node=sign_off]") !== null`)
	saveArtifact(t, "monitor-graph-approval.png", page.screenshotFull())
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
