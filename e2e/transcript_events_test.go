package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/thread"
)

// TestTranscriptEventsRenderAndSearch runs threads that hit a limit, fail
// a model call, spawn and wait on a child, return outputs and get
// cancelled, and reads their transcripts through the CLI: every event the
// worker writes carries the fields of its transcript type, so search finds
// the error's text and the markdown render shows the limit and the child.
// It also checks that coordination.yaml's wait_threads.max_threads bounds a
// wait.
func TestTranscriptEventsRenderAndSearch(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/looping.md":        directive("looping", `turns="10"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/short.md":          directive("short", `turns="5"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/parent.md":         directive("parent", `turns="5" spend="1.0"`, spawnPerms, `<success>done</success>`),
		".ai/directives/t/kid.md":            directive("kid", `turns="3"`, fsPerms, `<output name="answer" required="true">the answer</output>`),
		".ai/directives/t/sleepy.md":         directive("sleepy", `turns="3"`, fsPerms, `<success>done</success>`),
		".ai/config/agent/coordination.yaml": "coordination:\n  wait_threads:\n    max_threads: 2\n",
		"scripts/ev.yaml":                    script("events"),
		"scripts/sleepy.yaml":                script("sleepy"),
	}})
	e.StartWorker("--concurrency", "4")

	markdown := func(t *testing.T, id string) string {
		t.Helper()
		res := e.Spool("thread", "transcript", id, "--format", "markdown")
		require.Equal(t, 0, res.Code, res.Stderr)
		return res.Stdout
	}

	t.Run("limit", func(t *testing.T) {
		t.Parallel()
		rec, res := runJSON(t, e, "t/looping", "--model", "script:scripts/ev.yaml", "--limit", "turns=2")
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, thread.CodeTurnsExceeded, rec.Error.Code)
		limits := eventsOf(transcriptEvents(t, e, rec.ThreadID), "limit_exceeded")
		require.Len(t, limits, 1)
		require.Equal(t, map[string]any{"code": thread.CodeTurnsExceeded, "current": 2.0, "max": 2.0}, payload(limits[0]))
		md := markdown(t, rec.ThreadID)
		require.Contains(t, md, "> **limit** turns_exceeded: 2 of 2\n")
		require.Contains(t, md, "## Ended: error\n")
	})

	t.Run("model error", func(t *testing.T) {
		t.Parallel()
		rec, res := runJSON(t, e, "t/short", "--model", "script:scripts/ev.yaml")
		require.Equal(t, 1, res.Code, res.Stderr)
		require.Equal(t, "provider_permanent", rec.Error.Code)
		require.Contains(t, rec.Error.Message, `has no turn 2`)

		errs := eventsOf(transcriptEvents(t, e, rec.ThreadID), "error")
		require.Len(t, errs, 1)
		p := payload(errs[0])
		require.Equal(t, "permanent", p["class"])
		require.Equal(t, "provider_permanent", p["code"])
		// The record leaves out what its code says (provider_permanent);
		// the event, whose class says it too, has the provider's whole error.
		require.Equal(t, `script "scripts/ev.yaml": directive "t/short" has no turn 2 (it has 1)`, rec.Error.Message)
		require.Equal(t, "provider permanent: "+rec.Error.Message, p["message"])
		require.Nil(t, p["retryable"], "a permanent error is not retried")

		type searchOut struct {
			Matches []struct {
				EventType string `json:"event_type"`
				Text      string `json:"text"`
			} `json:"matches"`
		}
		found := spoolJSON[searchOut](t, e, "thread", "search", rec.ThreadID, "--query", `has no turn \d`, "--json")
		var types []string
		for _, m := range found.Matches {
			types = append(types, m.EventType)
			require.Contains(t, m.Text, "has no turn 2")
		}
		require.Contains(t, types, "error", "search looks at the error event's message")
		require.Contains(t, markdown(t, rec.ThreadID), "> **error** permanent provider permanent: ")
	})

	t.Run("child spawn, wait, directive_return", func(t *testing.T) {
		t.Parallel()
		rec := runCompleted(t, e, "t/parent", "--model", "script:scripts/ev.yaml")
		require.Contains(t, rec.Result, "wait_threads takes 1 to 2 thread_ids", "coordination.yaml's max_threads bounds a wait")
		kids := children(t, e, rec.ThreadID)
		require.Len(t, kids, 1)
		kid := kids[0].ThreadID

		events := transcriptEvents(t, e, rec.ThreadID)
		spawned := eventsOf(events, "child_spawned")
		require.Len(t, spawned, 1)
		require.Equal(t, map[string]any{"child_id": kid, "directive": "t/kid"}, payload(spawned[0]))
		waiting := eventsOf(events, "thread_waiting")
		require.Len(t, waiting, 1)
		require.Equal(t, []any{kid}, payload(waiting[0])["child_ids"])
		md := markdown(t, rec.ThreadID)
		require.Contains(t, md, fmt.Sprintf("> spawned child `%s` (t/kid)\n", kid))
		require.Contains(t, md, fmt.Sprintf("> waiting on `%s`\n", kid))

		returns := eventsOf(transcriptEvents(t, e, kid), "directive_return")
		require.Len(t, returns, 1)
		require.Equal(t, map[string]any{"answer": "forty-two"}, payload(returns[0])["outputs"])
		require.Contains(t, markdown(t, kid), "## Completed\n\n")
	})

	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		id := startThread(t, e, "t/sleepy", "--model", "script:scripts/sleepy.yaml")
		waitStatus(t, e, id, thread.StatusRunning)
		c := e.Spool("thread", "cancel", id)
		require.Equal(t, 0, c.Code, c.Stderr)
		final := e.Wait([]string{id}, time.Minute)[id]
		require.Equal(t, thread.StatusCancelled, final.Status)

		events := transcriptEvents(t, e, id)
		require.Empty(t, eventsOf(events, "thread_completed"), "a cancelled thread ends with thread_cancelled")
		cancelled := eventsOf(events, "thread_cancelled")
		require.Len(t, cancelled, 1)
		reason, _ := payload(cancelled[0])["reason"].(string)
		require.True(t, strings.HasPrefix(reason, "cancelled"), reason)
		require.Contains(t, markdown(t, id), "> **cancelled** "+reason+"\n")
	})
}
