package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestWriteBackSurvivesSIGKILL: a worker SIGKILLed in the middle of a
// rye/bash write-back of three files (its journal durable, one file
// stored) leaves no half-written workspace: the worker that takes the
// thread over rolls the write-back forward before anything reads the
// workspace, the command runs again from the turn's checkpoint and finds
// its files written, and the thread completes reading all three; no
// journal or staged content is left.
func TestWriteBackSurvivesSIGKILL(t *testing.T) {
	t.Parallel()
	for _, point := range []string{"workspace:journaled", "workspace:after_file"} {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			t.Parallel()
			e := spooltest.New(t, spooltest.Options{Files: map[string]string{
				".ai/directives/t/shell.md": directive("shell", `turns="6"`, fsPerms+`<execute><tool>rye/bash</tool></execute>`, `<success>done</success>`),
				"scripts/shell.yaml": `context_window: 200000
price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
directives:
  "t/shell":
    - tool_calls: [{tool: rye/bash, input: {command: "echo one > a.txt; echo two > b.txt; mkdir -p d; echo three > d/c.txt"}}]
      usage: {input: 10, output: 5}
    - tool_calls: [{tool: rye/file-system/fs_read, input: {path: "d/c.txt"}}]
      usage: {input: 10, output: 5}
    - text: "read: {{.last_tool_result}}"
      usage: {input: 10, output: 5}
`}})
			doomed := e.Start([]string{fastHousekeeping, "SPOOL_FAULT_KILL_AT=" + point}, "worker", "--concurrency", "2", "--allow-shell")
			res := e.Spool("thread", "run", "t/shell", "--model", "script:scripts/shell.yaml", "--json")
			require.Equal(t, 0, res.Code, res.Stderr)
			var rec registry.Record
			res.JSON(t, &rec)
			require.Eventually(t, doomed.Exited, time.Minute, 20*time.Millisecond, "the worker never reached %s:\n%s", point, doomed.Log())

			ctx := t.Context()
			journals, err := e.Store.List(ctx, blobkey.WorkspaceJournals(rec.ThreadID))
			require.NoError(t, err)
			require.Len(t, journals, 1, "killed with the journal durable")

			e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2", "--allow-shell")
			final := e.Wait([]string{rec.ThreadID}, 2*time.Minute)[rec.ThreadID]
			require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
			require.Contains(t, final.Result, "three")
			for p, want := range map[string]string{"a.txt": "one\n", "b.txt": "two\n", "d/c.txt": "three\n"} {
				b, err := e.Store.Get(ctx, blobkey.WorkspaceFile(rec.ThreadID, p))
				require.NoError(t, err, p)
				require.Equal(t, want, string(b), p)
			}
			for _, prefix := range []string{blobkey.WorkspaceJournals(rec.ThreadID), blobkey.Workspace(rec.ThreadID) + "staged/"} {
				left, err := e.Store.List(ctx, prefix)
				require.NoError(t, err)
				require.Empty(t, left, prefix)
			}
		})
	}
}
