package e2e

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/spooltest"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

const crashTurns = 6

// crashScript: six turns of a tool call each (with model latency, so kills
// land mid-call, mid-tool and mid-checkpoint), then a text answer.
func crashScript(latency string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "context_window: 200000\nprice: {input_per_mtok: 3.00, output_per_mtok: 15.00}\nlatency: %s\ndirectives:\n  \"t/crash\":\n", latency)
	for i := 1; i < crashTurns; i++ {
		fmt.Fprintf(&b, "    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: \"{{.thread_id}}/turn%d.txt\", content: \"turn %d\"}}]\n      usage: {input: %d, output: %d}\n", i, i, 100*i, 10*i)
	}
	fmt.Fprintf(&b, "    - text: \"done after %d turns\"\n      usage: {input: %d, output: %d}\n", crashTurns, 100*crashTurns, 10*crashTurns)
	return b.String()
}

// crashSpend is what one t/crash thread costs.
func crashSpend() float64 {
	var s float64
	for i := 1; i <= crashTurns; i++ {
		s += float64(100*i)*3/1e6 + float64(10*i)*15/1e6
	}
	return s
}

func crashProject(latency string) map[string]string {
	return map[string]string{
		".ai/directives/t/crash.md": directive("crash", `turns="10" spend="1.0"`, fsPerms, `<success>done</success>`),
		"scripts/crash.yaml":        crashScript(latency),
	}
}

// checkExactlyOnce asserts a finished crash thread completed every turn
// exactly once, in its transcript and in the ledger.
func checkExactlyOnce(t *testing.T, e *spooltest.Env, rec *queue.Record) {
	t.Helper()
	require.Equal(t, thread.StatusCompleted, rec.Status, rec.ThreadID)
	require.Equal(t, crashTurns, rec.Cost.Turns, rec.ThreadID)
	require.InDelta(t, crashSpend(), rec.Cost.Spend, 1e-9, rec.ThreadID)

	tr, err := transcript.Read(t.Context(), e.Store, rec.ThreadID, e.Orch.Keyring, transcript.Strict)
	require.NoError(t, err, "the transcript verifies")
	seen := map[int]int{}
	for _, ev := range tr.Events {
		if ev.Type != transcript.TypeCognitionOut {
			continue
		}
		var p transcript.CognitionOut
		require.NoError(t, json.Unmarshal(ev.Payload, &p))
		seen[p.Turn]++
	}
	for turn := 1; turn <= crashTurns; turn++ {
		require.Equal(t, 1, seen[turn], "thread %s turn %d recorded %d times", rec.ThreadID, turn, seen[turn])
	}
	entry, err := e.Orch.Ledger.Get(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.InDelta(t, crashSpend(), entry.Actual, 1e-9, "the ledger charged each turn exactly once")
	require.InDelta(t, 0, entry.Overrun, 1e-12)
}

func TestCrashRecoveryUnderSIGKILL(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: crashProject("120ms"), LeaseTTL: 2 * time.Second})
	fast := []string{"SPOOL_RECOVER_INTERVAL=500ms"}
	startWorker := func() *spooltest.Proc { return e.Start(fast, "worker", "--concurrency", "2") }
	workers := []*spooltest.Proc{startWorker(), startWorker(), startWorker()}

	const threads = 8
	var ids []string
	for i := 0; i < threads; i++ {
		res := e.Spool("thread", "run", "t/crash", "--model", "script:scripts/crash.yaml")
		require.Equal(t, 0, res.Code, res.Stderr)
		ids = append(ids, strings.TrimSpace(res.Stdout))
	}

	// 20 runs of: wait a random moment, SIGKILL a random worker by PID,
	// start a replacement.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	kills := 0
	for kills < 20 {
		time.Sleep(time.Duration(150+rng.IntN(650)) * time.Millisecond)
		i := rng.IntN(len(workers))
		pid := workers[i].Cmd.Process.Pid
		require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
		workers[i].Kill()
		workers[i] = startWorker()
		kills++
	}
	t.Logf("killed %d workers", kills)

	final := e.Wait(ids, 4*time.Minute)
	for _, id := range ids {
		checkExactlyOnce(t, e, final[id])
	}
}

func TestPausedWorkerCannotCommit(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: crashProject("400ms"), LeaseTTL: 2 * time.Second})
	fast := []string{"SPOOL_RECOVER_INTERVAL=500ms"}
	a := e.Start(fast, "worker", "--concurrency", "1")
	res := e.Spool("thread", "run", "t/crash", "--model", "script:scripts/crash.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	id := strings.TrimSpace(res.Stdout)

	// Let worker A take the thread through a turn, then pause it.
	require.Eventually(t, func() bool {
		rec, err := e.Orch.Registry.Get(t.Context(), id)
		return err == nil && rec.Cost.Turns >= 1
	}, time.Minute, 50*time.Millisecond)
	require.NoError(t, syscall.Kill(a.Cmd.Process.Pid, syscall.SIGSTOP))
	paused, err := e.Orch.Registry.Get(t.Context(), id)
	require.NoError(t, err)

	// Worker B recovers the thread once A's lease lapses, and finishes it.
	e.Start(fast, "worker", "--concurrency", "1")
	done := e.Wait([]string{id}, 2*time.Minute)[id]
	require.Greater(t, done.Activation, paused.Activation, "another activation took over")

	// A wakes up with a stale version: nothing it does may land.
	require.NoError(t, syscall.Kill(a.Cmd.Process.Pid, syscall.SIGCONT))
	require.Eventually(t, func() bool {
		return strings.Contains(a.Log(), "another activation owns the thread") || strings.Contains(a.Log(), "activation dropped")
	}, 30*time.Second, 100*time.Millisecond, "worker A notices it lost the thread:\n%s", a.Log())
	after, err := e.Orch.Registry.Get(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, done.Version, after.Version, "the paused worker committed nothing")
	checkExactlyOnce(t, e, after)
}

func TestSIGTERMHandsThreadsBack(t *testing.T) {
	t.Parallel()
	// Both threads are enqueued before the worker starts, so they run side
	// by side (each `spool thread run` is a process start, seconds apart
	// under -race on a loaded machine), and a model call takes a second, so
	// SIGTERM after the first turn lands with most of each thread to go.
	e := spooltest.New(t, spooltest.Options{Files: crashProject("1s"), LeaseTTL: 2 * time.Second})
	var ids []string
	for i := 0; i < 2; i++ {
		res := e.Spool("thread", "run", "t/crash", "--model", "script:scripts/crash.yaml")
		require.Equal(t, 0, res.Code, res.Stderr)
		ids = append(ids, strings.TrimSpace(res.Stdout))
	}
	a := e.StartWorker("--concurrency", "2", "--shutdown-timeout", "20s")
	require.Eventually(t, func() bool {
		for _, id := range ids {
			rec, err := e.Orch.Registry.Get(t.Context(), id)
			if err != nil || rec.Cost.Turns < 1 {
				return false
			}
		}
		return true
	}, time.Minute, 50*time.Millisecond)

	// SIGTERM mid-thread: A finishes the turn in flight, checkpoints,
	// hands the threads back and exits cleanly, well inside its timeout.
	stopped := time.Now()
	require.NoError(t, a.Stop(30*time.Second), "worker exits 0 on SIGTERM:\n%s", a.Log())
	require.Less(t, time.Since(stopped), 20*time.Second)
	for _, id := range ids {
		rec, err := e.Orch.Registry.Get(t.Context(), id)
		require.NoError(t, err)
		require.Equal(t, thread.StatusRunning, rec.Status, "handed back, not finished")
		require.Less(t, rec.Cost.Turns, crashTurns)
	}
	require.Contains(t, a.Log(), "handed back for shutdown")

	e.StartWorker("--concurrency", "2")
	final := e.Wait(ids, 2*time.Minute)
	for _, id := range ids {
		checkExactlyOnce(t, e, final[id])
	}
}
