package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

const spawnPerms = fsPerms + `<execute><tool>rye/agent/threads/thread_directive</tool></execute><execute><tool>rye/agent/threads/orchestrator</tool></execute>`

func directiveWithInputs(name, limits, perms, inputs string) string {
	return fmt.Sprintf("# %s\n\n```xml\n<directive name=%q version=\"1.0.0\">\n  <metadata>\n    <description>test</description>\n    <limits %s />\n    <permissions>%s</permissions>\n  </metadata>\n  <inputs>%s</inputs>\n</directive>\n```\n",
		name, name, limits, perms, inputs)
}

const levelInput = `<input name="level" type="integer" required="true">level</input>`

// script("slow") is the same as script("coord") but every call of t/slowleaf waits.
const slowLatency = "latency: 700ms\n"

func coordProject() map[string]string {
	return map[string]string{
		".ai/directives/t/chain.md":    directiveWithInputs("chain", `turns="6" spend="1.0" depth="10"`, spawnPerms, levelInput),
		".ai/directives/t/fan.md":      directiveWithInputs("fan", `turns="4" spend="2.0" depth="10" spawns="5"`, spawnPerms, levelInput),
		".ai/directives/t/spawner.md":  directive("spawner", `turns="4" spawns="2"`, spawnPerms, `<success>done</success>`),
		".ai/directives/t/leaf.md":     directive("leaf", `turns="2" spend="0.05"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/slowleaf.md": directive("slowleaf", `turns="10" spend="0.05"`, fsPerms, `<success>done</success>`),
		".ai/directives/t/boss.md":     directive("boss", `turns="6"`, spawnPerms, `<success>done</success>`),
		"scripts/c.yaml":               script("coord"),
		"scripts/slow.yaml":            slowLatency + script("coord"),
	}
}

// handoffProject is coordProject with t/long, which fills its context
// window (script handoff, run as script:scripts/h.yaml) and hands off.
func handoffProject() map[string]string {
	files := coordProject()
	files[".ai/directives/t/long.md"] = directive("long", `turns="5" spend="1.0"`, fsPerms, `<success>done</success>`)
	files["scripts/h.yaml"] = script("handoff")
	return files
}

// tree collects a thread and every descendant (children and continuations).
func tree(t *testing.T, e *spooltest.Env, root string) []*registry.Record {
	t.Helper()
	var out []*registry.Record
	queue := []string{root}
	seen := map[string]bool{}
	for len(queue) > 0 {
		id := queue[0]
		queue = queue[1:]
		if seen[id] {
			continue
		}
		seen[id] = true
		rec, err := e.Orch.Record(t.Context(), id)
		require.NoError(t, err)
		out = append(out, rec)
		kids := children(t, e, id)
		for _, k := range kids {
			queue = append(queue, k.ThreadID)
		}
		if rec.ContinuationThreadID != "" {
			queue = append(queue, rec.ContinuationThreadID)
		}
	}
	return out
}

func TestSpawnChainCascadesSpend(t *testing.T) {
	t.Parallel()
	onEachTopology(t, testSpawnChainCascadesSpend)
}

func testSpawnChainCascadesSpend(t *testing.T, top testenv.Topology) {
	e := spooltest.New(t, spooltest.Options{Files: coordProject(), Topology: top})
	e.StartWorker("--concurrency", "2")
	e.StartWorker("--concurrency", "2")
	rec := runCompleted(t, e, "t/chain", "--input", "level=1", "--model", "script:scripts/c.yaml")
	require.Contains(t, rec.Result, "done at level 1")
	require.Contains(t, rec.Result, "done at level 2", "the child's result is the spawn call's result")

	all := tree(t, e, rec.ThreadID)
	require.Len(t, all, 4, "levels 1 to 4")
	var sum float64
	for _, r := range all {
		require.Equal(t, thread.StatusCompleted, r.Status, r.ThreadID)
		sum += r.Cost.Spend
	}
	entry, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.InDelta(t, sum, entry.Actual, 1e-9, "root actual spend equals the sum of the tree")
	require.InDelta(t, 0, entry.Reserved, 1e-12, "every reservation came back")

	// The tree view shows the four levels.
	tr := e.Spool("thread", "tree", rec.ThreadID, "--json")
	require.Equal(t, 0, tr.Code, tr.Stderr)
	require.Equal(t, 4, strings.Count(tr.Stdout, `"directive": "t/chain"`), tr.Stdout)
}

func TestDepthAndSpawnLimits(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, coordProject(), "4")

	t.Run("grandchild rejected for depth", func(t *testing.T) {
		rec, res := runJSON(t, e, "t/chain", "--input", "level=1", "--model", "script:scripts/c.yaml", "--limit", "depth=1")
		require.Equal(t, 0, res.Code, res.Stderr)
		all := tree(t, e, rec.ThreadID)
		require.Len(t, all, 2, "root and child; the grandchild never registers")
		var child *registry.Record
		for _, r := range all {
			if r.ParentID == rec.ThreadID {
				child = r
			}
		}
		require.NotNil(t, child)
		require.Equal(t, 0, child.Limits.Depth)
		require.Contains(t, child.Result, thread.CodeDepthExceeded)
	})

	t.Run("spawn past the limit rejected", func(t *testing.T) {
		rec, res := runJSON(t, e, "t/spawner", "--model", "script:scripts/c.yaml")
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Contains(t, rec.Result, thread.CodeSpawnsExceeded)
		kids := children(t, e, rec.ThreadID)
		require.Len(t, kids, 2)
	})

	t.Run("unknown parent fails at once", func(t *testing.T) {
		res := e.Spool("thread", "run", "t/leaf", "--parent", "no-such-thread-1", "--model", "script:scripts/c.yaml")
		require.Equal(t, 1, res.Code)
		require.Contains(t, res.Stderr, `parent thread "no-such-thread-1" does not exist`)
	})
}

func TestDeepTreeOnConcurrencyTwo(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, coordProject(), "2")
	rec := runCompleted(t, e, "t/fan", "--input", "level=0", "--model", "script:scripts/c.yaml")
	all := tree(t, e, rec.ThreadID)
	require.Len(t, all, 1+3+9+27, "four levels, fan-out three")
	for _, r := range all {
		require.Equal(t, thread.StatusCompleted, r.Status, r.ThreadID)
	}
	entry, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	var sum float64
	for _, r := range all {
		sum += r.Cost.Spend
	}
	require.InDelta(t, sum, entry.Actual, 1e-9)
}

func TestCancelCascadesAcrossWorkers(t *testing.T) {
	t.Parallel()
	onEachTopology(t, testCancelCascadesAcrossWorkers)
}

func testCancelCascadesAcrossWorkers(t *testing.T, top testenv.Topology) {
	e := spooltest.New(t, spooltest.Options{Files: coordProject(), Topology: top})
	workers := []*spooltest.Proc{e.StartWorker("--concurrency", "2"), e.StartWorker("--concurrency", "2")}
	boss, kids := startBoss(t, e)
	require.Len(t, kids, 3)

	res := e.Spool("thread", "cancel", boss, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	ids := append([]string{boss}, threadIDs(kids)...)
	final := e.Wait(ids, 60*time.Second)
	for _, id := range ids {
		require.Equal(t, thread.StatusCancelled, final[id].Status, id)
		require.Less(t, final[id].Cost.Turns, 7, "stopped before its script ran out")
	}
	entry, err := e.Orch.LedgerEntry(t.Context(), boss)
	require.NoError(t, err)
	require.InDelta(t, 0, entry.Reserved, 1e-12, "cancelled children returned their reservations")
	for _, w := range workers {
		require.NotContains(t, w.Log(), "activation failed", "each activation recorded its cancel itself")
	}
}

func TestHandoffChainAndResume(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, handoffProject(), "2")
	e.StartWorker("--concurrency", "2")

	rec, res := runJSON(t, e, "t/long", "--model", "script:scripts/h.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCompleted, rec.Status, "--wait returns the chain's terminal thread")
	require.Equal(t, 2, rec.ChainIndex)
	root := rec.ChainRootID
	require.NotEqual(t, root, rec.ThreadID)

	type chainOut struct {
		ChainLength int                `json:"chain_length"`
		Chain       []*registry.Record `json:"chain"`
	}
	chain := spoolJSON[chainOut](t, e, "thread", "chain", root, "--json")
	require.Equal(t, 3, chain.ChainLength)
	require.Equal(t, thread.StatusContinued, chain.Chain[0].Status)
	require.Equal(t, thread.StatusContinued, chain.Chain[1].Status)
	require.Equal(t, thread.StatusCompleted, chain.Chain[2].Status)
	require.Equal(t, chain.Chain[1].ThreadID, chain.Chain[0].ContinuationThreadID)
	require.Equal(t, chain.Chain[0].ThreadID, chain.Chain[1].ContinuationOf)

	waited := spoolJSON[map[string]*registry.Record](t, e, "thread", "wait", root, "--json")
	require.Equal(t, rec.ThreadID, waited[root].ThreadID, "waiting on A returns C")

	// The handoff is logged in the old thread's transcript.
	tr := e.Spool("thread", "transcript", root, "--format", "jsonl")
	require.Equal(t, 0, tr.Code, tr.Stderr)
	require.Contains(t, tr.Stdout, `"event_type":"thread_handoff"`)
	require.Contains(t, tr.Stdout, `"trailing_turns":3`, "the prompt, the tool call and its result fit the default ceiling")

	// Search runs over the whole chain.
	s := e.Spool("thread", "search", root, "--query", "written by continuation [01]", "--json")
	require.Equal(t, 0, s.Code, s.Stderr)
	require.Contains(t, s.Stdout, chain.Chain[0].ThreadID)
	require.Contains(t, s.Stdout, chain.Chain[1].ThreadID)

	// Resume the completed chain (through its root id).
	type resumeOut struct {
		Success            bool    `json:"success"`
		OldThreadID        string  `json:"old_thread_id"`
		NewThreadID        string  `json:"new_thread_id"`
		OriginalThreadID   *string `json:"original_thread_id"`
		ResolvedThreadID   string  `json:"resolved_thread_id"`
		ReconstructedTurns int     `json:"reconstructed_turns"`
	}
	resumed := spoolJSON[resumeOut](t, e, "thread", "resume", root, "--message", "one more thing", "--json")
	require.True(t, resumed.Success)
	require.Equal(t, rec.ThreadID, resumed.ResolvedThreadID)
	require.Equal(t, rec.ThreadID, resumed.OldThreadID)
	require.NotNil(t, resumed.OriginalThreadID)
	require.Equal(t, root, *resumed.OriginalThreadID)
	require.Greater(t, resumed.ReconstructedTurns, 0)
	final := e.Wait([]string{resumed.NewThreadID}, 2*time.Minute)[resumed.NewThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status)
	require.Equal(t, 3, final.ChainIndex)
	old, err := e.Orch.Record(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.Equal(t, thread.StatusContinued, old.Status, "a resumed thread is continued")
	require.Equal(t, resumed.NewThreadID, old.ContinuationThreadID)

	// The resumed thread saw the user's message.
	nt := e.Spool("thread", "transcript", resumed.NewThreadID, "--format", "jsonl")
	require.Contains(t, nt.Stdout, "one more thing")
	// The original transcript logs the resume.
	ot := e.Spool("thread", "transcript", rec.ThreadID, "--format", "jsonl")
	require.Contains(t, ot.Stdout, `"event_type":"thread_resumed"`)
}

func TestResumeRefusals(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: coordProject(), NoS3: true})
	// No worker: the thread stays created.
	start := e.Spool("thread", "run", "t/leaf", "--model", "script:scripts/c.yaml")
	require.Equal(t, 0, start.Code, start.Stderr)
	id := strings.TrimSpace(start.Stdout)
	r := e.Spool("thread", "resume", id, "--message", "hi")
	require.Equal(t, 1, r.Code)
	require.Contains(t, r.Stderr, "is created: only completed, error or cancelled threads can be resumed")

	// A tampered transcript refuses the resume under strict integrity.
	e.StartWorker("--concurrency", "1")
	done := e.Wait([]string{id}, time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, done.Status)
	segs, err := e.Store.List(context.Background(), "threads/"+id+"/transcript/")
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	data, err := e.Store.Get(context.Background(), segs[0].Key)
	require.NoError(t, err)
	tampered := strings.Replace(string(data), "t/leaf", "t/lEaf", 1)
	require.NotEqual(t, string(data), tampered)
	require.NoError(t, e.Store.Put(context.Background(), segs[0].Key, []byte(tampered)))
	r = e.Spool("thread", "resume", id, "--message", "hi")
	require.Equal(t, 1, r.Code)
	require.Contains(t, r.Stderr, segs[0].Key, "the error names the segment")
	v := e.Spool("thread", "verify", id)
	require.Equal(t, 1, v.Code)
	require.Contains(t, v.Stderr, segs[0].Key)
}

// decodeEvents parses a jsonl transcript.
func decodeEvents(t *testing.T, jsonl string) []map[string]any {
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(jsonl), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &m))
		out = append(out, m)
	}
	return out
}

func TestWaitThreadsTimesOutThenWakes(t *testing.T) {
	t.Parallel()
	files := coordProject()
	// The waiter waits on a thread of another tree: that needs rye/threads/any.
	files[".ai/directives/t/waiter.md"] = directiveWithInputs("waiter", `turns="5"`, spawnPerms+`<execute><tool>rye/threads/any</tool></execute>`,
		`<input name="target" type="string" required="true">thread to wait on</input>`)
	files["scripts/wait.yaml"] = script("wait")
	e := workerEnv(t, files, "2")
	slow := e.Spool("thread", "run", "t/slowleaf", "--model", "script:scripts/slow.yaml")
	require.Equal(t, 0, slow.Code, slow.Stderr)
	target := strings.TrimSpace(slow.Stdout)
	require.Eventually(t, func() bool {
		r, err := e.Orch.Record(t.Context(), target)
		return err == nil && r.Status == thread.StatusRunning
	}, time.Minute, 20*time.Millisecond)

	rec := runCompleted(t, e, "t/waiter", "--input", "target="+target, "--model", "script:scripts/wait.yaml")
	var got struct {
		Success  bool `json:"success"`
		TimedOut bool `json:"timed_out"`
		Results  map[string]struct {
			Status string `json:"status"`
			Result string `json:"result"`
		} `json:"results"`
	}
	require.NoError(t, json.Unmarshal([]byte(rec.Result), &got), rec.Result)
	require.True(t, got.Success)
	require.False(t, got.TimedOut)
	require.Equal(t, "completed", got.Results[target].Status)

	// The first wait timed out: its result is in the transcript.
	tr := e.Spool("thread", "transcript", rec.ThreadID, "--format", "jsonl")
	require.Contains(t, tr.Stdout, `\"timed_out\":true`)
}
