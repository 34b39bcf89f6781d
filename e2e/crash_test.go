package e2e

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
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
func checkExactlyOnce(t *testing.T, e *spooltest.Env, rec *registry.Record) {
	t.Helper()
	require.Equal(t, thread.StatusCompleted, rec.Status, rec.ThreadID)
	require.Equal(t, crashTurns, rec.Cost.Turns, rec.ThreadID)
	require.InDelta(t, crashSpend(), rec.Cost.Spend, 1e-9, rec.ThreadID)

	seen := map[int]int{}
	for _, p := range payloads[transcript.CognitionOut](t, events(t, e, rec.ThreadID), transcript.TypeCognitionOut) {
		seen[p.Turn]++
	}
	for turn := 1; turn <= crashTurns; turn++ {
		require.Equal(t, 1, seen[turn], "thread %s turn %d recorded %d times", rec.ThreadID, turn, seen[turn])
	}
	entry, err := e.Orch.LedgerEntry(t.Context(), rec.ThreadID)
	require.NoError(t, err)
	require.InDelta(t, crashSpend(), entry.Actual, 1e-9, "the ledger charged each turn exactly once")
	require.InDelta(t, 0, entry.Overrun, 1e-12)
}

// TestCrashRecoveryUnderSIGKILL: 20 times, SIGKILL by PID the worker
// holding an in-flight thread's lease, at a random point of that thread
// (each model call takes 120ms, and between calls the worker runs a tool,
// records the response and charges the ledger, so a kill lands mid call,
// mid tool or mid checkpoint), then start a replacement. Every thread must
// complete with each turn recorded and charged exactly once, and every
// thread a kill landed on must have been taken over by a later activation.
//
// Which process holds a lease is not observable (the lease holds a random
// per-process token, not a PID), so exactly one worker is alive at a time:
// a thread still running whose activation counter rose after the previous
// worker died was claimed by the live worker, which holds its lease until
// the activation ends.
func TestCrashRecoveryUnderSIGKILL(t *testing.T) {
	t.Parallel()
	onEachTopology(t, testCrashRecoveryUnderSIGKILL)
}

func testCrashRecoveryUnderSIGKILL(t *testing.T, top testenv.Topology) {
	const kills = 20
	e := spooltest.New(t, spooltest.Options{Files: crashProject("120ms"), LeaseTTL: 2 * time.Second, Topology: top})
	fast := []string{"SPOOL_RECOVER_INTERVAL=500ms"}
	startWorker := func() *spooltest.Proc { return e.Start(fast, "worker", "--concurrency", "2") }
	enqueue := func() {
		res := e.Spool("thread", "run", "t/crash", "--model", "script:scripts/crash.yaml")
		require.Equal(t, 0, res.Code, res.Stderr)
	}
	get := func(id string) *registry.Record {
		rec, err := e.Orch.Record(t.Context(), id)
		require.NoError(t, err)
		return rec
	}
	lease := func(id string) string {
		v, err := e.Redis.Universal.Get(t.Context(), e.Keys.Lease(id)).Result()
		if errors.Is(err, redis.Nil) {
			return ""
		}
		require.NoError(t, err)
		return v
	}

	// Enqueued before any worker runs, so the kills start with work to
	// crash rather than after the first worker finished it.
	for i := 0; i < 8; i++ {
		enqueue()
	}
	active := func() []*registry.Record {
		recs, err := e.Orch.Active(t.Context())
		require.NoError(t, err)
		return recs
	}
	// before[id] is the thread's activation counter when the live worker
	// started (0 for threads made since): a claim since then is the live
	// worker's.
	var before map[string]int64
	snapshot := func() {
		before = map[string]int64{}
		for _, rec := range active() {
			before[rec.ThreadID] = rec.Activation
		}
	}
	// More threads are pushed in the background whenever at most two are
	// left to finish, so there is always something to crash; the scan
	// finds them in the registry. Not inline: `spool thread run` returns
	// well after it has enqueued (about a thread's run time under -race),
	// long enough for an idle live worker to finish the thread unseen.
	pushes := make(chan spooltest.Result, 1)
	pushing := false
	collect := func(block bool) {
		if !pushing {
			return
		}
		var res spooltest.Result
		if block {
			res = <-pushes
		} else {
			select {
			case res = <-pushes:
			default:
				return
			}
		}
		pushing = false
		require.Equal(t, 0, res.Code, res.Stderr)
	}
	// heldByLiveWorker waits for the live worker to hold threads mid-run
	// and picks one at random.
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	heldByLiveWorker := func(w *spooltest.Proc) (*registry.Record, string) {
		deadline := time.Now().Add(time.Minute)
		for {
			require.False(t, w.Exited(), "the live worker died by itself:\n%s", w.Log())
			require.True(t, time.Now().Before(deadline), "the live worker took no thread for a minute:\n%s", w.Log())
			collect(false)
			recs := active()
			if len(recs) <= 2 && !pushing {
				pushing = true
				go func() { pushes <- e.Spool("thread", "run", "t/crash", "--model", "script:scripts/crash.yaml") }()
			}
			type held struct {
				rec   *registry.Record
				lease string
			}
			var cands []held
			for _, rec := range recs {
				if rec.Status == thread.StatusRunning && rec.Activation > before[rec.ThreadID] {
					if l := lease(rec.ThreadID); l != "" {
						cands = append(cands, held{rec, l})
					}
				}
			}
			if len(cands) > 0 {
				c := cands[rng.IntN(len(cands))]
				return c.rec, c.lease
			}
			time.Sleep(10 * time.Millisecond)
		}
	}

	type kill struct {
		id         string
		activation int64 // the activation that was killed
		turns      int   // turns charged when it was killed
	}
	var landed []kill
	snapshot()
	w := startWorker()
	for len(landed) < kills {
		rec, held := heldByLiveWorker(w)
		// A random point of what is left of the thread: up to the length
		// of all its model calls.
		time.Sleep(time.Duration(rng.IntN(crashTurns*120)) * time.Millisecond)
		now := get(rec.ThreadID)
		if now.Status != thread.StatusRunning || now.Activation != rec.Activation || lease(rec.ThreadID) != held {
			continue // it finished first: pick again
		}
		require.NoError(t, syscall.Kill(w.Cmd.Process.Pid, syscall.SIGKILL))
		w.Kill() // reap it
		if after := get(rec.ThreadID); after.Status == thread.StatusRunning && after.Activation == rec.Activation {
			landed = append(landed, kill{id: rec.ThreadID, activation: rec.Activation, turns: after.Cost.Turns})
		}
		snapshot()
		w = startWorker()
	}
	collect(true) // a push still running: its thread counts too
	// Two more workers to finish the batch sooner.
	startWorker()
	startWorker()

	all, err := e.Orch.Threads(t.Context(), registry.Filter{})
	require.NoError(t, err)
	var ids []string
	for _, rec := range all {
		ids = append(ids, rec.ThreadID)
	}
	require.GreaterOrEqual(t, len(ids), 8)
	final := e.Wait(ids, 3*time.Minute)
	for _, id := range ids {
		checkExactlyOnce(t, e, final[id])
	}
	killedAt := map[string][]string{}
	for _, k := range landed {
		rec := final[k.id]
		require.GreaterOrEqual(t, rec.Activation, int64(2), "thread %s was killed mid-run: another activation finished it", k.id)
		require.Greater(t, rec.Activation, k.activation, "thread %s: activation %d was killed, a later one took over", k.id, k.activation)
		killedAt[k.id] = append(killedAt[k.id], fmt.Sprintf("a%d/t%d", k.activation, k.turns))
	}
	t.Logf("%d kills landed on %d of %d threads (activation/turns charged at the kill): %v", len(landed), len(killedAt), len(ids), killedAt)
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
		rec, err := e.Orch.Record(t.Context(), id)
		return err == nil && rec.Cost.Turns >= 1
	}, time.Minute, 50*time.Millisecond)
	require.NoError(t, syscall.Kill(a.Cmd.Process.Pid, syscall.SIGSTOP))
	paused, err := e.Orch.Record(t.Context(), id)
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
	after, err := e.Orch.Record(t.Context(), id)
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
			rec, err := e.Orch.Record(t.Context(), id)
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
		rec, err := e.Orch.Record(t.Context(), id)
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
