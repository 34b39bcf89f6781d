package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// quorumGraph fans out g/dawdle over inputs.items and goes on once
// min_success of them succeeded.
const quorumGraph = `config:
  start: fan
  nodes:
    fan:
      type: foreach
      over: "${inputs.items}"
      parallel: true
      max_concurrency: 6
      min_success: 2
      action: {directive: g/dawdle, inputs: {n: "${item}"}}
      assign: {succeeded: "${result.succeeded}", failed: "${result.failed}", cancelled: "${result.cancelled}"}
      next: done
    done:
      type: return
      output: {succeeded: "${state.succeeded}", failed: "${state.failed}", cancelled: "${state.cancelled}"}
`

// dawdleFiles add g/dawdle: an item named quick-* returns at its first
// turn, bad-* fails (its script has no turn for it), any other takes 30
// slow turns.
func dawdleFiles(files map[string]string) map[string]string {
	files[".ai/directives/g/dawdle.md"] = "# dawdle\n\n```xml\n<directive name=\"dawdle\" version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n" +
		"    <model tier=\"slow\" />\n    <limits turns=\"40\" spend=\"0.5\" />\n    <permissions>" + fsPerms + "</permissions>\n  </metadata>\n" +
		"  <inputs><input name=\"n\" type=\"string\" required=\"true\">item</input></inputs>\n" +
		"  <outputs><output name=\"value\" required=\"true\">value</output></outputs>\n</directive>\n```\n"
	files[".ai/config/agent/models.yaml"] = "tiers:\n  fast: script:scripts/g.yaml\n  slow: script:scripts/slow.yaml\n"
	turns := "    - tool_calls:\n        - tool: rye/agent/threads/directive_return\n          input: {value: \"{{.inputs.n}}\"}\n" +
		"      when: '{{contains \"quick\" .inputs.n}}'\n"
	for i := 0; i < 30; i++ {
		turns += "    - tool_calls:\n        - tool: rye/file-system/fs_write\n          input: {path: \"dawdle/{{.inputs.n}}.txt\", content: \"turn\"}\n" +
			"      when: '{{and (not (contains \"quick\" .inputs.n)) (not (contains \"bad\" .inputs.n))}}'\n      usage: {input: 100, output: 10}\n"
	}
	files["scripts/slow.yaml"] = "price: {input_per_mtok: 1.00, output_per_mtok: 5.00}\nlatency: 300ms\ndirectives:\n  \"g/dawdle\":\n" + turns
	return files
}

// TestForeachMinSuccess (spec 14.8 v2): a foreach with min_success N
// succeeds as soon as N items have (the others are cancelled, and their
// spend stops: each ended cancelled within a few of its 30 turns), and
// fails min_success_unreachable as soon as N can no longer succeed,
// without waiting for the rest.
func TestForeachMinSuccess(t *testing.T) {
	t.Parallel()
	files := dawdleFiles(walkProject("0ms", nil))
	files[".ai/graphs/g/quorum.yaml"] = "version: \"1\"\ndescription: a quorum of two\n" + walkPerms + quorumGraph
	files[".ai/graphs/g/quorum3.yaml"] = "version: \"1\"\ndescription: a quorum of three\n" + walkPerms + strings.Replace(quorumGraph, "min_success: 2", "min_success: 3", 1)
	e := spooltest.New(t, spooltest.Options{Files: files})
	e.StartWorker("--concurrency", "8")

	t.Run("reached", func(t *testing.T) {
		rec, res := runGraph(t, e, "g/quorum", "--inputs-json",
			`{"items": ["quick-a", "slow-b", "quick-c", "slow-d"]}`)
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Equal(t, thread.StatusCompleted, rec.Status)
		require.Equal(t, map[string]any{"succeeded": float64(2), "failed": float64(0), "cancelled": float64(2)}, rec.Outputs)
		kids := listed(t, e, rec.ThreadID)
		dawdlers := 0
		for _, k := range kids {
			if strings.HasPrefix(k.Inputs["n"].(string), "quick") {
				require.Equal(t, thread.StatusCompleted, k.Status)
				continue
			}
			dawdlers++
			final := e.Wait([]string{k.ThreadID}, time.Minute)[k.ThreadID]
			require.Equal(t, thread.StatusCancelled, final.Status, "the rest is cancelled")
			require.Less(t, final.Cost.Turns, 10, "its spend stopped: %d of 30 turns", final.Cost.Turns)
		}
		require.Equal(t, 2, dawdlers)
	})
	t.Run("unreachable", func(t *testing.T) {
		rec, res := runGraph(t, e, "g/quorum3", "--inputs-json",
			`{"items": ["bad-a", "bad-b", "quick-c", "slow-d"]}`)
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, thread.StatusError, rec.Status)
		require.NotNil(t, rec.Error)
		require.Contains(t, rec.Error.Message, "min_success 3 can no longer be reached")
		for _, k := range listed(t, e, rec.ThreadID) {
			if strings.HasPrefix(k.Inputs["n"].(string), "slow") {
				final := e.Wait([]string{k.ThreadID}, time.Minute)[k.ThreadID]
				require.Equal(t, thread.StatusCancelled, final.Status, "not waited for")
			}
		}
	})
}

// TestForeachFailCancelsRunningItems (spec 6, on_item_error: fail): at
// the first failed item no further item starts and the running ones are
// cancelled (their spend stops), and the step fails foreach_item_failed
// with that item's error, not with a cancelled sibling's.
func TestForeachFailCancelsRunningItems(t *testing.T) {
	t.Parallel()
	files := dawdleFiles(walkProject("0ms", nil))
	files[".ai/graphs/g/failfast.yaml"] = "version: \"1\"\ndescription: fail at the first failed item\n" + walkPerms +
		strings.NewReplacer("      min_success: 2\n", "", ", cancelled: \"${result.cancelled}\"", "", ", cancelled: \"${state.cancelled}\"", "").Replace(quorumGraph)
	e := spooltest.New(t, spooltest.Options{Files: files})
	e.StartWorker("--concurrency", "8")
	rec, res := runGraph(t, e, "g/failfast", "--inputs-json", `{"items": ["slow-a", "slow-b", "bad-c", "slow-d"]}`)
	require.Equal(t, 1, res.Code, res.Stderr)
	require.Equal(t, thread.StatusError, rec.Status)
	require.NotNil(t, rec.Error)
	require.Contains(t, rec.Error.Message, "item failed (provider_permanent)", "the bad item's error")
	require.NotContains(t, rec.Error.Message, "cancel", "the failure is the bad item's, not a cancelled sibling's")
	slow := 0
	for _, k := range listed(t, e, rec.ThreadID) {
		if !strings.HasPrefix(k.Inputs["n"].(string), "slow") {
			continue
		}
		slow++
		require.Equal(t, thread.StatusCancelled, k.Status, "settled before the step failed")
		require.Less(t, k.Cost.Turns, 10, "its spend stopped: %d of 30 turns", k.Cost.Turns)
	}
	require.Equal(t, 3, slow)
}

// TestForeachFailStopCrash: the worker walking a foreach dies after an
// item failed and before it cancelled the running ones
// (graph:before_stop); the activation that takes the run over cancels
// them, and the step fails with the failed item's error.
func TestForeachFailStopCrash(t *testing.T) {
	t.Parallel()
	files := dawdleFiles(walkProject("0ms", nil))
	files[".ai/graphs/g/failfast.yaml"] = "version: \"1\"\ndescription: fail at the first failed item\n" + walkPerms +
		strings.NewReplacer("      min_success: 2\n", "", ", cancelled: \"${result.cancelled}\"", "", ", cancelled: \"${state.cancelled}\"", "").Replace(quorumGraph)
	e := spooltest.New(t, spooltest.Options{Files: files, LeaseTTL: 2 * time.Second})
	fast := "SPOOL_RECOVER_INTERVAL=500ms"
	doomed := e.Start([]string{fast, "SPOOL_FAULT_KILL_AT=graph:before_stop"}, "worker", "--concurrency", "8")
	res := e.Spool("graph", "run", "g/failfast", "--json", "--inputs-json", `{"items": ["slow-a", "bad-b", "slow-c"]}`)
	require.Equal(t, 0, res.Code, res.Stderr)
	var rec registry.Record
	res.JSON(t, &rec)
	require.Eventually(t, doomed.Exited, time.Minute, 20*time.Millisecond, "the worker never reached graph:before_stop:\n%s", doomed.Log())
	e.Start([]string{fast}, "worker", "--concurrency", "8")
	final := e.Wait([]string{rec.ThreadID}, 2*time.Minute)[rec.ThreadID]
	require.Equal(t, thread.StatusError, final.Status)
	require.NotNil(t, final.Error)
	require.Contains(t, final.Error.Message, "item failed (provider_permanent)")
	for _, k := range listed(t, e, rec.ThreadID) {
		if strings.HasPrefix(k.Inputs["n"].(string), "slow") {
			require.Equal(t, thread.StatusCancelled, k.Status, "cancelled by the activation that took over")
		}
	}
}

// listed are the children of run id.
func listed(t *testing.T, e *spooltest.Env, id string) []registry.Record {
	t.Helper()
	res := e.Spool("thread", "list", "--parent", id, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	return listedThreads(t, res)
}
