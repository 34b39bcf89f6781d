package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestRootChainSharesWorkspaceAndResumesTwice: a root thread's
// continuation and its resumes work in the root's workspace, and a chain
// resumed through its first id twice resumes its newest thread each time
// (a resumed thread is continued, so the chain resolves past it).
func TestRootChainSharesWorkspaceAndResumesTwice(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		".ai/directives/t/ws.md": directive("ws", `turns="5" spend="1.0"`, fsPerms, `<success>done</success>`),
		"scripts/ws.yaml":        script("ws"),
	}
	e := workerEnv(t, files, "2")
	e.StartWorker("--concurrency", "2")

	rec := runCompleted(t, e, "t/ws", "--model", "script:scripts/ws.yaml")
	require.Equal(t, 1, rec.ChainIndex, "one handoff")
	require.Equal(t, "thread 1 read: written by the first thread", rec.Result, "the continuation sees the first thread's file")
	root := rec.ChainRootID

	last := rec.ThreadID
	for i := 2; i <= 3; i++ {
		type resumeOut struct {
			OldThreadID string `json:"old_thread_id"`
			NewThreadID string `json:"new_thread_id"`
		}
		resumed := spoolJSON[resumeOut](t, e, "thread", "resume", root, "--message", "read it again", "--json")
		require.Equal(t, last, resumed.OldThreadID, "resume %d resolves the chain to its newest thread", i)
		final := e.Wait([]string{resumed.NewThreadID}, 2*time.Minute)[resumed.NewThreadID]
		require.Equal(t, thread.StatusCompleted, final.Status, final.Error)
		require.Equal(t, i, final.ChainIndex)
		require.Equal(t, "thread "+strconv.Itoa(i)+" read: written by the first thread", final.Result)
		old, err := e.Orch.Record(t.Context(), last)
		require.NoError(t, err)
		require.Equal(t, thread.StatusContinued, old.Status)
		require.Equal(t, resumed.NewThreadID, old.ContinuationThreadID)
		last = resumed.NewThreadID
	}

	// Waiting on the first id returns the chain's newest thread.
	waited := spoolJSON[map[string]*registry.Record](t, e, "thread", "wait", root, "--json")
	require.Equal(t, last, waited[root].ThreadID)
}

// TestCancelWithoutCascadeLeavesChildren: `spool thread cancel
// --cascade=false` stops the parent and leaves its running children to
// run to their end; with the project's child policy on_parent_cancel:
// allow, a plain cancel does the same. (TestCancelCascadesAcrossWorkers
// covers the default, cascading, policy.)
func TestCancelWithoutCascadeLeavesChildren(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		files map[string]string
		args  []string
	}{
		{name: "cascade=false", args: []string{"--cascade=false"}},
		{name: "policy allow", files: map[string]string{
			".ai/config/agent/resilience.yaml": "child_policy:\n  on_parent_cancel: allow\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			files := coordProject()
			for k, v := range tc.files {
				files[k] = v
			}
			e := workerEnv(t, files, "4")
			boss, kids := startBoss(t, e)

			res := e.Spool(append([]string{"thread", "cancel", boss, "--json"}, tc.args...)...)
			require.Equal(t, 0, res.Code, res.Stderr)
			final := e.Wait(append([]string{boss}, threadIDs(kids)...), 2*time.Minute)
			require.Equal(t, thread.StatusCancelled, final[boss].Status)
			for _, k := range kids {
				// The children run to their own end: all six turns their
				// limit (capped by the boss's turns) allows.
				kid := final[k.ThreadID]
				require.NotEqual(t, thread.StatusCancelled, kid.Status, "child %s keeps running", k.ThreadID)
				require.Equal(t, 6, kid.Cost.Turns, "child %s ran every turn: %+v", k.ThreadID, kid.Error)
			}
		})
	}
}

// TestCancelReachesTheContinuation: cancelling a thread that was continued
// cancels the thread its chain has reached.
func TestCancelReachesTheContinuation(t *testing.T) {
	t.Parallel()
	files := map[string]string{
		".ai/directives/t/slowchain.md": directive("slowchain", `turns="10" spend="1.0"`, fsPerms, `<success>done</success>`),
		"scripts/sc.yaml":               script("slow_chain"),
	}
	e := workerEnv(t, files, "2")
	res := e.Spool("thread", "run", "t/slowchain", "--model", "script:scripts/sc.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	first := strings.TrimSpace(res.Stdout)

	var cont string
	require.Eventually(t, func() bool {
		rec, err := e.Orch.Record(t.Context(), first)
		if err != nil || rec.ContinuationThreadID == "" {
			return false
		}
		next, err := e.Orch.Record(t.Context(), rec.ContinuationThreadID)
		cont = rec.ContinuationThreadID
		return err == nil && next.Status == thread.StatusRunning && next.Cost.Turns >= 1
	}, time.Minute, 50*time.Millisecond)

	type cancelOut struct {
		ThreadID        string `json:"thread_id"`
		CancelRequested bool   `json:"cancel_requested"`
	}
	out := spoolJSON[cancelOut](t, e, "thread", "cancel", first, "--json")
	require.Equal(t, cont, out.ThreadID, "the chain's current thread")
	require.True(t, out.CancelRequested)
	final := e.Wait([]string{cont}, time.Minute)[cont]
	require.Equal(t, thread.StatusCancelled, final.Status)
	require.Less(t, final.Cost.Turns, 6)
	old, err := e.Orch.Record(t.Context(), first)
	require.NoError(t, err)
	require.Equal(t, thread.StatusContinued, old.Status)
}
