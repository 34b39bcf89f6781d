package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// tickTool appends the time (ns) to $HOME/ticks/<thread>: each turn of a
// ticker thread leaves a mark outside Redis, read after the run.
const tickTool = "#!/bin/sh\nmkdir -p \"$HOME/ticks\"\ndate +%s%N >> \"$HOME/ticks/$(echo \"$SPOOL_THREAD_ID\" | tr / _)\"\necho '{\"output\": \"tick\"}'\n"

// tickerProject is a directive of turns turns, each calling t/tick.
func tickerProject(turns int) map[string]string {
	var b strings.Builder
	b.WriteString("latency: 50ms\ndirectives:\n  \"f/ticker\":\n")
	for range turns {
		b.WriteString("    - tool_calls: [{tool: t/tick, input: {}}]\n      usage: {input: 10, output: 5}\n")
	}
	b.WriteString("    - text: \"ticked\"\n      usage: {input: 10, output: 5}\n")
	return map[string]string{
		".ai/directives/f/ticker.md": directive("ticker", fmt.Sprintf(`turns="%d"`, turns+2),
			`<execute><tool>t/tick</tool></execute>`, `<success>done</success>`),
		".ai/tools/t/tick.sh": tickTool,
		"scripts/ticker.yaml": b.String(),
	}
}

// ticks reads the tick marks of thread id, in order.
func ticks(t *testing.T, home, id string) []time.Time {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "ticks", strings.ReplaceAll(id, "/", "_")))
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var out []time.Time
	for _, line := range strings.Fields(string(b)) {
		ns, err := strconv.ParseInt(line, 10, 64)
		require.NoError(t, err)
		out = append(out, time.Unix(0, ns))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// TestClusterMasterKilledUnderLoad kills a master of a Redis Cluster
// with replicas (3 masters, 3 replicas) while threads run on two
// workers, and bounds the stall: every thread that was running goes on
// within seconds of its replica's promotion, because the workers reload
// the cluster's slots as soon as a node fails (and every few seconds
// anyway) instead of dialing the dead node until go-redis's once-a-minute
// reload.
func TestClusterMasterKilledUnderLoad(t *testing.T) {
	t.Parallel()
	const (
		threads = 12
		turns   = 120
		// stallBound is the longest a running thread may go without a
		// turn, counted from its master's promotion.
		stallBound = 10 * time.Second
	)
	pc := testenv.NewPrivateCluster(t, 3, 1, 3*time.Second)
	e := spooltest.New(t, spooltest.Options{Redis: pc.Redis, Files: tickerProject(turns)})
	home := filepath.Dir(e.Project)
	e.StartWorker("--concurrency", "6")
	e.StartWorker("--concurrency", "6")
	ids := make([]string, threads)
	for i := range ids {
		ids[i] = startThread(t, e, "f/ticker", "--model", "script:scripts/ticker.yaml")
	}
	// Under load: every thread has made a few turns.
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if len(ticks(t, home, id)) < 3 {
				return false
			}
		}
		return true
	}, 2*time.Minute, 50*time.Millisecond)

	// The victim: the master holding the most of the threads' records.
	held := map[*testenv.ClusterNode]int{}
	for _, id := range ids {
		slot, err := pc.Universal.ClusterKeySlot(context.Background(), e.Keys.Thread(id)).Result()
		require.NoError(t, err)
		held[pc.MasterOfSlot(slot)]++
	}
	victim := pc.Nodes[0]
	for nd, n := range held {
		if n > held[victim] {
			victim = nd
		}
	}
	t.Logf("the records of %d of the %d threads are on %s", held[victim], threads, victim.Addr)
	killed := time.Now()
	victim.Kill()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	promoted, err := pc.Promoted(ctx, victim)
	require.NoError(t, err)
	promotedAfter := time.Since(killed)
	t.Logf("master %s killed; replica %s promoted after %s", victim.Addr, promoted, promotedAfter.Round(100*time.Millisecond))

	// Read the records by polling: a read that fails while the cluster
	// fails over is tried again.
	final := map[string]*registry.Record{}
	require.Eventually(t, func() bool {
		for _, id := range ids {
			if final[id] != nil {
				continue
			}
			if rec, err := e.Orch.Record(ctx, id); err == nil && rec.Status.Terminal() {
				final[id] = rec
			}
		}
		return len(final) == len(ids)
	}, 5*time.Minute, 200*time.Millisecond)
	var worst, lastTurn time.Duration
	var worstID string
	stalled := 0
	for _, id := range ids {
		require.Equal(t, thread.StatusCompleted, final[id].Status, "%s: %+v", id, final[id].Error)
		tk := ticks(t, home, id)
		// The stall: the longest time without a turn that ends after the
		// kill (a turn may still run just after it, and stop at its
		// checkpoint).
		var gap time.Duration
		for i := 1; i < len(tk); i++ {
			if tk[i].After(killed) {
				gap = max(gap, tk[i].Sub(tk[i-1]))
			}
		}
		if len(tk) == 0 || !tk[len(tk)-1].After(killed) {
			continue
		}
		lastTurn = max(lastTurn, tk[len(tk)-1].Sub(killed))
		t.Logf("%s: %d turns, at most %s without a turn after the kill", id, len(tk), gap.Round(10*time.Millisecond))
		if gap > 2*time.Second {
			stalled++
		}
		if gap > worst {
			worst, worstID = gap, id
		}
	}
	t.Logf("%d of %d threads stalled over 2s after the kill; the longest, %s, %s (%s after the promotion); the last turn of all %s after the kill",
		stalled, threads, worstID, worst.Round(100*time.Millisecond), (worst - promotedAfter).Round(100*time.Millisecond), lastTurn.Round(100*time.Millisecond))
	require.Less(t, worst, promotedAfter+stallBound, "a thread stalled past the promotion by more than %s", stallBound)
}
