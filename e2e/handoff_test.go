package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
)

// summedScript hands off after two tool turns of the first thread; the
// continuation finishes. The first turn's text is long (about 230 tokens
// with its call), the second's shorter (about 130), so a resume ceiling of
// 200 tokens fits the second turn and both results but not the first turn.
func summedScript() string {
	return fmt.Sprintf(`context_window: 2000
price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
directives:
  "t/summed":
    - text: %q
      tool_calls: [{tool: rye/file-system/fs_write, input: {path: "part1.txt", content: "one"}}]
      when: '{{eq .chain_index 0}}'
      usage: {input: 500, output: 40}
    - text: %q
      tool_calls: [{tool: rye/file-system/fs_write, input: {path: "part2.txt", content: "two"}}]
      when: '{{eq .chain_index 0}}'
      usage: {input: 1900, output: 40}
    - text: "finished after {{.previous_thread_id}}"
      when: '{{eq .chain_index 1}}'
      usage: {input: 300, output: 20}
`, "FIRST-TURN "+strings.Repeat("a", 800), "SECOND-TURN "+strings.Repeat("b", 400))
}

// summedHooks are the spec's hook-driven summary: after_complete writes a
// summary of the thread (after a slow step, so a continuation started
// before the hooks finish would find none), thread_continued reads the
// previous thread's summary and loads notes named by an input.
const summedHooks = `
<hook id="slow_summary" event="after_complete"><action primary="execute" item_type="tool" item_id="t/slow_summary"/></hook>
<hook id="write_summary" event="after_complete"><action primary="execute" item_type="tool" item_id="rye/file-system/fs_write">
  <param name="path">summary_${thread_id}.txt</param><param name="content">summary of ${thread_id}</param></action></hook>
<hook id="read_summary" event="thread_continued"><action primary="execute" item_type="tool" item_id="rye/file-system/fs_read">
  <param name="path">summary_${previous_thread_id}.txt</param></action></hook>
<hook id="inject_notes" event="thread_continued"><action primary="load" item_type="knowledge" item_id="notes/${inputs.tag}"/></hook>
`

// transcriptEvents returns a thread's transcript events.
func transcriptEvents(t *testing.T, e *spooltest.Env, id string) []map[string]any {
	t.Helper()
	tr := e.Spool("thread", "transcript", id, "--format", "jsonl")
	require.Equal(t, 0, tr.Code, tr.Stderr)
	return decodeEvents(t, tr.Stdout)
}

func eventsOf(events []map[string]any, types ...string) []map[string]any {
	var out []map[string]any
	for _, ev := range events {
		for _, typ := range types {
			if ev["event_type"] == typ {
				out = append(out, ev)
			}
		}
	}
	return out
}

func payload(ev map[string]any) map[string]any {
	p, _ := ev["payload"].(map[string]any)
	return p
}

func eventTime(t *testing.T, ev map[string]any) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, ev["timestamp"].(string))
	require.NoError(t, err)
	return ts
}

// hooksFired returns the hook_fired events of one hook event, as
// "hook_id: error" lines.
func hooksFired(events []map[string]any, event string) []string {
	var out []string
	for _, ev := range eventsOf(events, "hook_fired") {
		if p := payload(ev); p["event"] == event {
			errText, _ := p["error"].(string) // left out when the hook succeeded
			out = append(out, fmt.Sprintf("%s: %s", p["hook_id"], errText))
		}
	}
	return out
}

// TestHandoffCarriesTrailingTurnsAndSummary checks the two halves of a
// handoff that a continuation depends on: its first messages are the
// previous thread's last turns (not just one message), and the previous
// thread's after_complete hooks ran, once, before the continuation began,
// so its thread_continued hooks find what they wrote.
func TestHandoffCarriesTrailingTurnsAndSummary(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		".ai/directives/t/summed.md": directiveWithHooks("summed", `turns="5" spend="1.0"`,
			fsPerms+`<execute><tool>t/slow_summary</tool></execute><load><knowledge>notes/*</knowledge></load>`, summedHooks,
			`<input name="tag" type="string" required="true">notes to load</input>`),
		".ai/tools/t/slow_summary.sh":        "#!/bin/sh\nsleep 2\necho '{\"output\": \"summarized\"}'\n",
		".ai/knowledge/notes/blue.md":        "NOTES-FOR-BLUE: the palette is blue.\n",
		".ai/config/agent/coordination.yaml": "coordination:\n  continuation:\n    resume_ceiling_tokens: 200\n",
		"scripts/hs.yaml":                    summedScript(),
	}
	e := workerEnv(t, files, "2")
	e.StartWorker("--concurrency", "2")

	rec := runCompleted(t, e, "t/summed", "--input", "tag=blue", "--model", "script:scripts/hs.yaml")
	require.Equal(t, 1, rec.ChainIndex)
	a, b := rec.ChainRootID, rec.ThreadID
	require.NotEqual(t, a, b)
	aEvents, bEvents := transcriptEvents(t, e, a), transcriptEvents(t, e, b)

	// The handoff records how many of A's messages B carries.
	handoffs := eventsOf(aEvents, "thread_handoff")
	require.Len(t, handoffs, 1)
	require.Equal(t, b, payload(handoffs[0])["new_thread_id"])
	require.EqualValues(t, 2, payload(handoffs[0])["trailing_turns"], "the second turn's call and its result")
	// B records what it continues and how many of A's model turns it
	// carries (what a resume counts too): the second, with its result.
	continued := eventsOf(bEvents, "thread_continued")
	require.Len(t, continued, 1)
	require.Equal(t, a, payload(continued[0])["previous_thread_id"])
	require.EqualValues(t, 1, payload(continued[0])["reconstructed_turns"])

	// B opens with A's last turn, after a note that earlier turns were
	// omitted, then the continuation seed with the notes hook's context.
	msgs := eventsOf(bEvents, "cognition_in", "cognition_out", "tool_call_result")
	require.GreaterOrEqual(t, len(msgs), 4)
	require.Equal(t, "cognition_in", msgs[0]["event_type"])
	require.Contains(t, payload(msgs[0])["content"], "Earlier turns of the previous thread were omitted")
	require.Equal(t, "cognition_out", msgs[1]["event_type"])
	require.Contains(t, payload(msgs[1])["content"], "SECOND-TURN")
	require.Equal(t, "tool_call_result", msgs[2]["event_type"])
	require.Equal(t, "call_2_1", payload(msgs[2])["call_id"], "the result of the call B carries")
	require.Equal(t, "cognition_in", msgs[3]["event_type"])
	require.Contains(t, payload(msgs[3])["content"], "This thread continues thread")
	require.Contains(t, payload(msgs[3])["content"], "NOTES-FOR-BLUE", "thread_continued hooks see the chain's inputs")
	for _, m := range msgs {
		require.NotContains(t, fmt.Sprint(payload(m)), "FIRST-TURN", "the first turn does not fit the ceiling")
	}

	// A's after_complete hooks ran once, durably, before B started; B's
	// thread_continued hooks read the summary they wrote.
	require.Equal(t, []string{"slow_summary: ", "write_summary: "}, hooksFired(aEvents, "after_complete"))
	require.Equal(t, []string{"read_summary: ", "inject_notes: "}, hooksFired(bEvents, "thread_continued"))
	started := eventsOf(bEvents, "thread_started")
	require.Len(t, started, 1)
	require.Equal(t, a, payload(started[0])["previous_thread_id"])
	var summaryWritten time.Time
	for _, ev := range eventsOf(aEvents, "hook_fired") {
		if payload(ev)["hook_id"] == "write_summary" {
			summaryWritten = eventTime(t, ev)
		}
	}
	require.True(t, summaryWritten.Before(eventTime(t, started[0])), "A's after_complete hooks finished before B started")
}
