package e2e

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/thread"
)

// bigScript plays a model of a 200,000-token window (input usage
// estimated from the prompt, as the model would report it): a turn that
// writes a file, then done.
const bigScript = `context_window: 200000
directives:
  "t/big":
    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: "{{.thread_id}}.txt", content: "read"}}]
    - text: "done"
`

// bigGraph hands each of its items to a t/big child.
const bigGraph = `version: "1.0.0"
description: one child per item
permissions:
  - rye.execute.directive.t.*
inputs:
  type: object
  required: [items]
  properties:
    items: {type: array, items: {type: string}}
config:
  start: each
  nodes:
    each:
      type: foreach
      over: "${inputs.items}"
      as: it
      on_item_error: continue
      action:
        directive: t/big
        inputs: {item: "${it}"}
      collect: results
      next: done
    done:
      type: return
      output: {results: "${state.results | length}"}
`

// TestContextTooSmall: what a model's context window cannot hold fails at
// once, with context_too_small, instead of handing off to continuations
// that carry it again, up to the chain's cap (20 handoffs, 21 model calls
// of the oversized prompt). A first message of 900,000 characters to a
// model of 200,000 tokens makes no call; one of 740,000 fits, makes its
// call and fills the context, and its handoff, whose continuation would
// carry the same prompt in its seed, is not taken. Through a graph's
// foreach, the oversized item's child fails alone, with no continuation.
func TestContextTooSmall(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, map[string]string{
		".ai/directives/t/big.md": strings.NewReplacer("```xml", "Read this: {input:item}\n\n```xml", "<limits", `<model tier="big" /><limits`).Replace(
			directiveWithInputs("big", `turns="6" spend="1.0"`, fsPerms, `<input name="item" type="string" required="true">the item</input>`)),
		".ai/graphs/g/big.yaml":        bigGraph,
		".ai/config/agent/models.yaml": "tiers:\n  big: script:scripts/big.yaml\n",
		"scripts/big.yaml":             bigScript,
	}, "2")
	inputs := func(v any) string {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		file := filepath.Join(t.TempDir(), "inputs.json")
		testenv.WriteFile(t, file, string(b))
		return "@" + file
	}

	t.Run("a first message that cannot fit", func(t *testing.T) {
		rec, res := runJSON(t, e, "t/big", "--inputs-json", inputs(map[string]string{"item": strings.Repeat("a", 900_000)}))
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, thread.StatusError, rec.Status)
		require.Equal(t, "context_too_small", rec.Error.Code, rec.Error.Message)
		require.Contains(t, rec.Error.Message, "its first message is about 225")
		require.Contains(t, rec.Error.Message, "no model call was made")
		require.Equal(t, 0, rec.Cost.Turns, "no model call")
		require.Empty(t, rec.ContinuationThreadID, "no handoff")
		require.Empty(t, eventsOf(transcriptEvents(t, e, rec.ThreadID), "cognition_out", "thread_handoff"))
	})

	t.Run("a handoff that would make no room", func(t *testing.T) {
		rec, res := runJSON(t, e, "t/big", "--inputs-json", inputs(map[string]string{"item": strings.Repeat("a", 740_000)}))
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, thread.StatusError, rec.Status)
		require.Equal(t, "context_too_small", rec.Error.Code, rec.Error.Message)
		require.Contains(t, rec.Error.Message, "a handoff would make no room")
		require.Equal(t, 1, rec.Cost.Turns, "the one call the prompt fit")
		require.Empty(t, rec.ContinuationThreadID, "no handoff")
		require.Equal(t, 0, rec.ChainIndex)
		require.Empty(t, eventsOf(transcriptEvents(t, e, rec.ThreadID), "thread_handoff"))
	})

	t.Run("a graph's foreach child", func(t *testing.T) {
		run, res := runGraph(t, e, "g/big", "--inputs-json", inputs(map[string][]string{"items": {"small", strings.Repeat("a", 900_000)}}))
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Equal(t, thread.StatusCompleted, run.Status, "%+v", run.Error)
		kids := children(t, e, run.ThreadID)
		require.Len(t, kids, 2, "one thread per item, no continuation")
		codes := map[string]int{}
		for _, k := range kids {
			require.Empty(t, k.ContinuationThreadID, "%s handed off", k.ThreadID)
			if k.Error != nil {
				codes[k.Error.Code] = k.Cost.Turns
				continue
			}
			require.Equal(t, thread.StatusCompleted, k.Status)
			codes["completed"] = k.Cost.Turns
		}
		require.Equal(t, map[string]int{"completed": 2, "context_too_small": 0}, codes,
			"the small item's child ran its two turns, the oversized one's made no call")
	})
}
