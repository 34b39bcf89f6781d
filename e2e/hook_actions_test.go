package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/thread"
)

const srcInput = `<input name="src" type="string" required="true">thread whose knowledge to load</input>`

// loadSourceHooks load another thread's knowledge at thread_started, by
// thread id and in the spec's reinject_summary shape (execute on
// knowledge agent/threads/<directive>/<thread id>); summarize executes a
// project tool under rye/agent/threads/, which the thread does not hold.
const loadSourceHooks = `
<hook id="by_id" event="thread_started"><action primary="load" item_type="knowledge" item_id="agent/threads/${inputs.src}"/></hook>
<hook id="reinject_summary" event="thread_started"><action primary="execute" item_type="knowledge" item_id="agent/threads/t/source/${inputs.src}"/></hook>
<hook id="summarize" event="thread_started"><action primary="execute" item_type="tool" item_id="rye/agent/threads/thread_summary"/></hook>
`

// noteToolErrors records tool failures in the workspace.
const noteToolErrors = `
<hook id="note_error" event="error"><condition path="source" op="eq" value="tool"/>
  <action primary="execute" item_type="tool" item_id="rye/file-system/fs_write">
    <param name="path">errors.txt</param><param name="content">${classification} ${tool}: ${error}</param></action></hook>
`

// TestHookActions: a hook loads another thread's knowledge render (found
// through the registry), only with the load capability; a hook's execute
// is held to the thread's capabilities like the model's tool calls; a
// failed tool fires the error hooks and goes back to the model, without
// failing the thread. Refused hooks are hook errors in the transcript and
// the thread runs on.
func TestHookActions(t *testing.T) {
	t.Parallel()
	loadPerm := `<load><knowledge>agent/threads/*</knowledge></load>`
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/t/source.md":                    directive("source", `turns="3"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/reader.md":                    directiveWithHooks("reader", `turns="3"`, fsPerms+loadPerm, loadSourceHooks, srcInput),
		".ai/directives/t/noload.md":                    directiveWithHooks("noload", `turns="3"`, fsPerms, loadSourceHooks, srcInput),
		".ai/directives/t/failing.md":                   directiveWithHooks("failing", `turns="4"`, fsPerms, noteToolErrors, ""),
		".ai/tools/rye/agent/threads/thread_summary.sh": markTool,
		"scripts/h.yaml":                                script("hook_actions"),
	}})
	e.StartWorker("--concurrency", "4")
	home := filepath.Dir(e.Project)

	src, res := runJSON(t, e, "t/source", "--model", "script:scripts/h.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	// No render exists until one is read: a hook's load renders the
	// finished source from its transcript (then stores it, signed).
	_, err := e.Store.Get(t.Context(), blobkey.Knowledge("t/source", src.ThreadID))
	require.ErrorIs(t, err, blobstore.ErrNotFound, "renders are made when read, not on the turn's path")

	firstMessage := func(t *testing.T, events []map[string]any) string {
		t.Helper()
		in := eventsOf(events, "cognition_in")
		require.NotEmpty(t, in)
		return payload(in[0])["content"].(string)
	}
	summaryRan := func(id string) bool {
		_, err := os.Stat(filepath.Join(home, "started-"+strings.ReplaceAll(id, "/", "_")))
		return err == nil
	}
	refusedTool := "permission denied: calling rye/agent/threads/thread_summary needs capability rye.execute.tool.rye.agent.threads.thread_summary"

	t.Run("load with the capability", func(t *testing.T) {
		t.Parallel()
		rec, res := runJSON(t, e, "t/reader", "--input", "src="+src.ThreadID, "--model", "script:scripts/h.yaml")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Equal(t, thread.StatusCompleted, rec.Status, "a refused hook does not stop the thread")
		events := transcriptEvents(t, e, rec.ThreadID)
		fired := hooksFired(events, "thread_started")
		require.Len(t, fired, 3)
		require.Equal(t, []string{"by_id: ", "reinject_summary: "}, fired[:2], "both spellings of the thread's knowledge id load")
		require.True(t, strings.HasPrefix(fired[2], "summarize: hook tool rye/agent/threads/thread_summary: "+refusedTool), fired[2])
		require.False(t, summaryRan(rec.ThreadID), "the refused tool did not run")

		first := firstMessage(t, events)
		require.Equal(t, 2, strings.Count(first, "entry_type: thread_transcript\n"+"category: \"agent/threads/t/source\""), "the source's render, injected by both hooks")
		require.Contains(t, first, "SOURCE-NOTE-42: the API schema is v3")
		require.NotContains(t, first, "rye:signed:", "the render is verified and injected without its signature line")

		md := e.Spool("thread", "transcript", rec.ThreadID, "--format", "markdown")
		require.Equal(t, 0, md.Code, md.Stderr)
		require.Contains(t, md.Stdout, "> **hook error** `summarize` (thread_started): hook tool rye/agent/threads/thread_summary: "+refusedTool)
	})

	t.Run("load without the capability", func(t *testing.T) {
		t.Parallel()
		rec := runCompleted(t, e, "t/noload", "--input", "src="+src.ThreadID, "--model", "script:scripts/h.yaml")
		events := transcriptEvents(t, e, rec.ThreadID)
		fired := hooksFired(events, "thread_started")
		require.Len(t, fired, 3)
		require.Equal(t, "by_id: load knowledge agent/threads/"+src.ThreadID+": capability rye.load.knowledge.agent.threads."+
			thread.NormalizeCapability(src.ThreadID)+" not held", fired[0])
		require.Contains(t, fired[1], "reinject_summary: load knowledge agent/threads/t/source/"+src.ThreadID+": capability ")
		require.NotContains(t, firstMessage(t, events), "SOURCE-NOTE-42")
		require.False(t, summaryRan(rec.ThreadID))
	})

	t.Run("a failed tool fires the error hooks", func(t *testing.T) {
		t.Parallel()
		rec, res := runJSON(t, e, "t/failing", "--model", "script:scripts/h.yaml")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Equal(t, thread.StatusCompleted, rec.Status, "the builtin error hooks do not fail the thread for a tool")
		require.Contains(t, rec.Result, "saw: ")
		toolErr := strings.TrimPrefix(rec.Result, "saw: ")
		require.Contains(t, toolErr, "missing.txt", "the model got the tool's error")

		events := transcriptEvents(t, e, rec.ThreadID)
		require.Equal(t, []string{"note_error: "}, hooksFired(events, "error"))
		require.Empty(t, eventsOf(events, "error"), "no model call failed")
		data, err := e.Store.Get(t.Context(), blobkey.WorkspaceFile(rec.ThreadID, "errors.txt"))
		require.NoError(t, err)
		require.Equal(t, "permanent rye/file-system/fs_read: "+toolErr, string(data))
	})
}
