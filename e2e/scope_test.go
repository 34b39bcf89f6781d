package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

const targetInput = `<input name="target" type="string" required="true">thread</input>`

// TestCoordinationIsTreeScoped: a thread holding only the orchestrator
// capability cannot read, search, list, cancel, resume or wait on a thread
// of another tree (each call is refused to the model), while a thread
// reaches its own tree; the rye.threads.any capability reaches any.
func TestCoordinationIsTreeScoped(t *testing.T) {
	t.Parallel()
	orch := `<execute><tool>rye/agent/threads/orchestrator</tool></execute>`
	files := map[string]string{
		".ai/directives/s/victim.md":  directiveWithInputs("victim", `turns="4"`, spawnPerms, ""),
		".ai/directives/s/sleeper.md": directiveWithInputs("sleeper", `turns="2"`, fsPerms, ""),
		".ai/directives/s/snoop.md":   directiveWithInputs("snoop", `turns="4"`, orch, targetInput),
		".ai/directives/s/admin.md":   directiveWithInputs("admin", `turns="4"`, orch+`<execute><tool>rye.threads.any</tool></execute>`, targetInput),
		".ai/directives/s/family.md":  directiveWithInputs("family", `turns="4"`, spawnPerms, ""),
		".ai/directives/s/child.md":   directiveWithInputs("child", `turns="4"`, orch, ""),
		"scripts/s.yaml":              script("scope"),
	}
	files["scripts/s.yaml"] = script("scope")
	e := workerEnv(t, files, "3")

	victim := runCompleted(t, e, "s/victim", "--model", "script:scripts/s.yaml")

	snoop, res := runJSON(t, e, "s/snoop", "--input", "target="+victim.ThreadID, "--model", "script:scripts/s.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, 7, strings.Count(snoop.Result, "not in this thread's tree"), "every call refused: %s", snoop.Result)
	require.NotContains(t, snoop.Result, "victim done", "nothing of the other tree leaks")
	after, err := e.Orch.Record(t.Context(), victim.ThreadID)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCompleted, after.Status)
	require.Empty(t, after.ContinuationThreadID, "not resumed")

	admin, res := runJSON(t, e, "s/admin", "--input", "target="+victim.ThreadID, "--model", "script:scripts/s.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Zero(t, strings.Count(admin.Result, "not in this thread's tree"), admin.Result)
	require.Contains(t, admin.Result, "victim done")
	// The admin resumed the victim, which carries on in its own chain.
	final := e.Wait([]string{victim.ThreadID}, time.Minute)[victim.ThreadID]
	require.NotEqual(t, thread.StatusRunning, final.Status)

	family, res := runJSON(t, e, "s/family", "--model", "script:scripts/s.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	kids := children(t, e, family.ThreadID)
	require.Len(t, kids, 1)
	require.Contains(t, kids[0].Result, `"thread_id":"`+family.ThreadID+`"`, "a child reads its own tree")
}
