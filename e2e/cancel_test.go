package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// directiveWithHooks renders a directive file with a <hooks> block.
func directiveWithHooks(name, limits, permissions, hooksXML, inputs string) string {
	return fmt.Sprintf("# %s\n\nA test directive.\n\n```xml\n<directive name=%q version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n    <limits %s />\n    <permissions>%s</permissions>\n    <hooks>%s</hooks>\n  </metadata>\n  <inputs>%s</inputs>\n  <outputs><success>done</success></outputs>\n</directive>\n```\n",
		name, name, limits, permissions, hooksXML, inputs)
}

// markTool is a project tool that marks that it ran for a thread (in
// $HOME, which is the test's root directory); sleepTool marks that it
// started, then runs far longer than the test.
const (
	markTool  = "#!/bin/sh\ntouch \"$HOME/started-$(echo \"$SPOOL_THREAD_ID\" | tr / _)\"\necho '{\"output\": \"marked\"}'\n"
	sleepTool = "#!/bin/sh\ntouch \"$HOME/started-$(echo \"$SPOOL_THREAD_ID\" | tr / _)\"\nsleep 60\necho '{\"output\": \"slept\"}'\n"
)

func cancelProject() map[string]string {
	sleepPerm := `<execute><tool>t/sleep</tool></execute>`
	return map[string]string{
		// t/think's thread_started hook marks that its model call is next.
		".ai/directives/t/think.md": directiveWithHooks("think", `turns="3"`, fsPerms+`<execute><tool>t/mark</tool></execute>`,
			`<hook id="mark" event="thread_started"><action primary="execute" item_type="tool" item_id="t/mark"/></hook>`, ""),
		".ai/directives/t/tooling.md": directive("tooling", `turns="3"`, fsPerms+sleepPerm, `<success>done</success>`),
		".ai/directives/t/stepper.md": directiveWithHooks("stepper", `turns="3"`, fsPerms+sleepPerm,
			`<hook id="slow_step" event="after_step"><action primary="execute" item_type="tool" item_id="t/sleep"/></hook>`, ""),
		".ai/tools/t/mark.sh":  markTool,
		".ai/tools/t/sleep.sh": sleepTool,
		"scripts/cancel.yaml":  script("cancel"),
		"scripts/slow.yaml":    script("slow_model"),
	}
}

// TestCancelEndsTheActivation cancels a thread where the request reaches
// its activation: during the model call, during a tool call, and between
// turns (during an after_step hook). The activation itself must record the
// cancel: with a lease of 20s, a thread finalized only after its lease
// lapsed and a recovering worker took it would take more than a third of
// that, and its worker would log a failed activation.
func TestCancelEndsTheActivation(t *testing.T) {
	t.Parallel()
	const lease = 20 * time.Second
	e := spooltest.New(t, spooltest.Options{Files: cancelProject(), LeaseTTL: lease})
	w := e.StartWorker("--concurrency", "2")
	home := filepath.Dir(e.Project)

	// start starts the thread and waits until its tool or hook marked
	// that it ran.
	start := func(t *testing.T, name, script string) string {
		t.Helper()
		id := startThread(t, e, name, "--model", "script:"+script)
		marker := filepath.Join(home, "started-"+strings.ReplaceAll(id, "/", "_"))
		require.Eventually(t, func() bool { _, err := os.Stat(marker); return err == nil }, time.Minute, 20*time.Millisecond)
		return id
	}
	cancel := func(t *testing.T, id string) *registry.Record {
		t.Helper()
		began := time.Now()
		res := e.Spool("thread", "cancel", id, "--json")
		require.Equal(t, 0, res.Code, res.Stderr)
		rec := e.Wait([]string{id}, 2*lease)[id]
		took := time.Since(began)
		require.Equal(t, thread.StatusCancelled, rec.Status, "error: %+v", rec.Error)
		require.NotNil(t, rec.Error)
		require.Equal(t, "cancelled", rec.Error.Code)
		require.Less(t, took, lease/3, "the activation finalizes the cancel itself, without waiting for its lease to lapse")
		require.NotContains(t, w.Log(), "activation failed")
		entry, err := e.Orch.LedgerEntry(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, "cancelled", entry.Status)
		return rec
	}

	t.Run("during the model call", func(t *testing.T) {
		id := start(t, "t/think", "scripts/slow.yaml")
		time.Sleep(300 * time.Millisecond) // into the 60s model call
		rec := cancel(t, id)
		require.Equal(t, "cancelled during the model call", rec.Error.Message)
		require.Zero(t, rec.Cost.Turns, "the call never answered")
	})

	t.Run("during a tool call", func(t *testing.T) {
		id := start(t, "t/tooling", "scripts/cancel.yaml")
		rec := cancel(t, id)
		require.Equal(t, "cancelled during tool t/sleep", rec.Error.Message)
		require.Equal(t, 1, rec.Cost.Turns, "the turn that called the tool is recorded")
		tr := e.Spool("thread", "transcript", id, "--format", "jsonl")
		require.Equal(t, 0, tr.Code, tr.Stderr)
		require.Contains(t, tr.Stdout, "the thread was cancelled while this tool ran", "the interrupted call is answered")
	})

	t.Run("between turns", func(t *testing.T) {
		id := start(t, "t/stepper", "scripts/cancel.yaml")
		rec := cancel(t, id)
		require.Equal(t, "cancelled by request", rec.Error.Message)
		require.Equal(t, 1, rec.Cost.Turns, "stopped after the first turn's after_step hook")
	})
}
