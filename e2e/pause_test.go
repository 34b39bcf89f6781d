package e2e

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// pauseTurns is how many turns p/work takes: pauseTurns-1 writes, then
// its return.
const pauseTurns = 6

// pauseProject: p/work takes pauseTurns slow turns (250 ms a model
// call); p/boss starts two p/work children at once, waits on them and
// returns; g/pausable runs p/work over four items, two at a time.
func pauseProject() map[string]string {
	work := ""
	for i := 1; i < pauseTurns; i++ {
		work += fmt.Sprintf("    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: \"w/{{.inputs.n}}-%d.txt\", content: \"turn %d\"}}]\n      usage: {input: 100, output: 10}\n", i, i)
	}
	work += "    - tool_calls: [{tool: rye/agent/threads/directive_return, input: {value: \"{{.inputs.n}}\"}}]\n      usage: {input: 100, output: 10}\n"
	sc := "price: {input_per_mtok: 1.00, output_per_mtok: 5.00}\nlatency: 250ms\ndirectives:\n  \"p/work\":\n" + work +
		"  \"p/boss\":\n" +
		"    - tool_calls:\n" +
		"        - {tool: rye/agent/threads/thread_directive, input: {directive_name: p/work, inputs: {n: k1}, async: true}}\n" +
		"        - {tool: rye/agent/threads/thread_directive, input: {directive_name: p/work, inputs: {n: k2}, async: true}}\n" +
		"      usage: {input: 100, output: 10}\n" +
		"    - tool_calls:\n" +
		"        - {tool: rye/agent/threads/orchestrator, input: {operation: wait_threads, thread_ids: \"{{toJSON (fields \\\"thread_id\\\" .tool_results)}}\"}}\n" +
		"      usage: {input: 100, output: 10}\n" +
		"    - text: \"boss done\"\n      usage: {input: 100, output: 10}\n"
	return map[string]string{
		".ai/directives/p/work.md": "# work\n\n```xml\n<directive name=\"work\" version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n" +
			"    <model tier=\"fast\" />\n    <limits turns=\"10\" spend=\"0.5\" />\n    <permissions>" + fsPerms + "</permissions>\n  </metadata>\n" +
			"  <inputs><input name=\"n\" type=\"string\" required=\"true\">item</input></inputs>\n" +
			"  <outputs><output name=\"value\" required=\"true\">value</output></outputs>\n</directive>\n```\n",
		".ai/directives/p/boss.md":     directive("boss", `turns="8" spend="1.0"`, spawnPerms, `<success>done</success>`),
		".ai/config/agent/models.yaml": "tiers:\n  fast: script:scripts/pause.yaml\n",
		"scripts/pause.yaml":           sc,
		".ai/graphs/g/pausable.yaml": "version: \"1\"\ndescription: four items, two at a time\npermissions:\n  - rye.execute.tool.rye.file-system.*\n  - rye.execute.directive.p.*\n" +
			"config:\n  start: fan\n  nodes:\n    fan:\n      type: foreach\n      over: \"${inputs.items}\"\n      parallel: true\n      max_concurrency: 2\n" +
			"      action: {directive: p/work, inputs: {n: \"${item}\"}}\n      assign: {succeeded: \"${result.succeeded}\"}\n      next: done\n" +
			"    done:\n      type: return\n      output: {succeeded: \"${state.succeeded}\"}\n",
	}
}

// workSpend is what one p/work spends: pauseTurns turns of 100 input and
// 10 output tokens.
func workSpend() float64 { return float64(pauseTurns) * (100.0/1e6 + 10*5.0/1e6) }

// TestPauseAndUnpause (issue: pause and unpause) pauses, on real Redis
// and a worker process, at each kind of boundary, and unpauses to
// completion: a thread mid-turn (it pauses before its next model call),
// a parent waiting on its children (paused at once; the children at
// their next turn, paused with it by --tree named on a child), and a
// graph run in a foreach (paused at once; its running items at their
// next turn; no further item starts). While paused, nothing of the tree
// moves (no turn, no spend) and `thread list --status paused` lists it;
// unpaused, every run completes with every turn taken once and the
// ledger equal to what the turns spent.
func TestPauseAndUnpause(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: pauseProject()})
	e.StartWorker("--concurrency", "4")

	pause := func(t *testing.T, verb string, args ...string) spooltype.PauseResult {
		t.Helper()
		return spoolJSON[spooltype.PauseResult](t, e, append([]string{"thread", verb}, append(args, "--json")...)...)
	}
	// tree is the records of id's tree (id and its descendants).
	var tree func(t *testing.T, id string) []*registry.Record
	tree = func(t *testing.T, id string) []*registry.Record {
		rec, err := e.Orch.Record(t.Context(), id)
		require.NoError(t, err)
		out := []*registry.Record{rec}
		kids, err := e.Orch.Children(t.Context(), id)
		require.NoError(t, err)
		for _, k := range kids {
			out = append(out, tree(t, k.ThreadID)...)
		}
		return out
	}
	// allPaused waits until every unfinished run of id's tree is paused,
	// then checks that nothing moves for a second and a half.
	allPaused := func(t *testing.T, id string) map[string]int {
		t.Helper()
		require.Eventually(t, func() bool {
			for _, r := range tree(t, id) {
				if !r.Status.Terminal() && r.Status != thread.StatusPaused {
					return false
				}
			}
			return true
		}, 30*time.Second, 50*time.Millisecond, "every unfinished run of the tree paused")
		turns := map[string]int{}
		for _, r := range tree(t, id) {
			turns[r.ThreadID] = r.Cost.Turns
		}
		time.Sleep(1500 * time.Millisecond)
		for _, r := range tree(t, id) {
			require.Equal(t, turns[r.ThreadID], r.Cost.Turns, "%s took a turn while paused", r.ThreadID)
			if !r.Status.Terminal() {
				require.Equal(t, thread.StatusPaused, r.Status, r.ThreadID)
				require.True(t, r.PauseRequested, r.ThreadID)
			}
		}
		listed := listedThreads(t, e.Spool("thread", "list", "--status", "paused", "--json"))
		ids := map[string]bool{}
		for _, r := range listed {
			ids[r.ThreadID] = true
		}
		require.True(t, ids[id] || tree(t, id)[0].Status.Terminal(), "thread list --status paused lists %s", id)
		return turns
	}
	// exact checks a completed p/work: every turn once, the ledger what
	// they spent.
	exact := func(t *testing.T, r *registry.Record) {
		t.Helper()
		require.Equal(t, thread.StatusCompleted, r.Status, "%s: %+v", r.ThreadID, r.Error)
		require.Equal(t, pauseTurns, r.Cost.Turns, r.ThreadID)
		require.InDelta(t, workSpend(), r.Cost.Spend, 1e-9, r.ThreadID)
		entry, err := e.Orch.LedgerEntry(t.Context(), r.ThreadID)
		require.NoError(t, err)
		require.InDelta(t, workSpend(), entry.Actual, 1e-9, "the ledger of %s holds each turn once", r.ThreadID)
	}

	t.Run("mid-turn", func(t *testing.T) {
		id := startThread(t, e, "p/work", "--input", "n=solo")
		require.Eventually(t, func() bool {
			r, err := e.Orch.Record(t.Context(), id)
			return err == nil && r.Status == thread.StatusRunning && r.Cost.Turns >= 1
		}, 30*time.Second, 20*time.Millisecond)
		res := pause(t, "pause", id)
		require.True(t, res.PauseRequested)
		require.Equal(t, 1, res.Runs)
		turns := allPaused(t, id)
		require.Less(t, turns[id], pauseTurns, "paused before its end")
		show := spoolJSON[registry.Record](t, e, "thread", "show", id, "--json")
		require.Equal(t, thread.StatusPaused, show.Status)

		res = pause(t, "unpause", id)
		require.False(t, res.PauseRequested)
		exact(t, e.Wait([]string{id}, time.Minute)[id])
		again := e.Spool("thread", "unpause", id)
		require.Equal(t, 1, again.Code, "a finished run cannot be unpaused: %s", again.Stdout)
		require.Contains(t, again.Stderr, "run_ended")
	})

	t.Run("waiting on children", func(t *testing.T) {
		boss := startThread(t, e, "p/boss", "--model", "script:scripts/pause.yaml")
		var kids []*registry.Record
		require.Eventually(t, func() bool {
			r, err := e.Orch.Record(t.Context(), boss)
			if err != nil || r.Status != thread.StatusWaiting {
				return false
			}
			kids, err = e.Orch.Children(t.Context(), boss)
			return err == nil && len(kids) == 2 && kids[0].Cost.Turns >= 1 && kids[1].Cost.Turns >= 1
		}, 30*time.Second, 20*time.Millisecond)
		res := pause(t, "pause", kids[0].ThreadID, "--tree")
		require.Equal(t, boss, res.ThreadID, "--tree pauses from the root")
		require.Equal(t, 3, res.Runs)
		require.Equal(t, thread.StatusPaused, res.Status, "a waiting run is paused at once")
		allPaused(t, boss)

		pause(t, "unpause", boss)
		rec := e.Wait([]string{boss}, time.Minute)[boss]
		require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
		require.Equal(t, "boss done", rec.Result)
		var sum float64
		for _, k := range tree(t, boss)[1:] {
			exact(t, k)
			sum += k.Cost.Spend
		}
		entry, err := e.Orch.LedgerEntry(t.Context(), boss)
		require.NoError(t, err)
		require.InDelta(t, rec.Cost.Spend+sum, entry.Actual, 1e-9, "the boss's ledger holds the tree's spend")
	})

	t.Run("in a foreach", func(t *testing.T) {
		run := spoolJSON[registry.Record](t, e, "graph", "run", "g/pausable", "--inputs-json", `{"items": ["a", "b", "c", "d"]}`, "--json").ThreadID
		require.Eventually(t, func() bool {
			kids, err := e.Orch.Children(t.Context(), run)
			return err == nil && len(kids) >= 2 && kids[0].Cost.Turns >= 1
		}, 30*time.Second, 20*time.Millisecond)
		res := pause(t, "pause", run)
		require.GreaterOrEqual(t, res.Runs, 2)
		// The run's activation, holding on its children, lets go at once
		// (not at the end of its hold): it is paused, holding no slot.
		require.Eventually(t, func() bool {
			r, err := e.Orch.Record(t.Context(), run)
			return err == nil && r.Status == thread.StatusPaused
		}, 3*time.Second, 20*time.Millisecond, "the graph run paused without waiting out its hold")
		allPaused(t, run)
		kids, err := e.Orch.Children(t.Context(), run)
		require.NoError(t, err)
		require.LessOrEqual(t, len(kids), 3, "no item starts while the run is paused")
		shown := e.Spool("graph", "show", run)
		require.Equal(t, 0, shown.Code, shown.Stderr)
		require.Contains(t, shown.Stdout, "paused")
		require.Regexp(t, `(?m)^paused +since \S+.*: spool graph unpause `+regexp.QuoteMeta(run)+` lets it go on where it was$`, shown.Stdout)

		pause(t, "unpause", run)
		rec := e.Wait([]string{run}, 2*time.Minute)[run]
		require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
		require.Equal(t, float64(4), rec.Outputs["succeeded"])
		kids, err = e.Orch.Children(t.Context(), run)
		require.NoError(t, err)
		require.Len(t, kids, 4, "each item ran once")
		var sum float64
		for _, k := range kids {
			exact(t, k)
			sum += k.Cost.Spend
		}
		entry, err := e.Orch.LedgerEntry(t.Context(), run)
		require.NoError(t, err)
		require.InDelta(t, sum, entry.Actual, 1e-9, "the run's ledger holds its items' spend, once")
		require.InDelta(t, sum, rec.Cost.Spend, 1e-9)
		require.False(t, strings.Contains(e.Spool("thread", "list", "--status", "paused").Stdout, run))
	})
}
