package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

const chaosTurns = 6

// chaosScript: five turns that each write a file, then a text answer,
// each model call taking 200ms, so that threads are mid-turn, mid-tool
// and mid-checkpoint when Redis dies.
func chaosScript() string {
	var b strings.Builder
	b.WriteString("context_window: 200000\nprice: {input_per_mtok: 3.00, output_per_mtok: 15.00}\nlatency: 200ms\ndirectives:\n  \"c/writer\":\n")
	for i := 1; i < chaosTurns; i++ {
		fmt.Fprintf(&b, "    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: \"{{.thread_id}}/part%d.txt\", content: \"part %d of {{.thread_id}}\"}}]\n      usage: {input: %d, output: %d}\n", i, i, 100*i+7, 10*i+3)
	}
	fmt.Fprintf(&b, "    - text: \"wrote %d parts\"\n      usage: {input: 700, output: 70}\n", chaosTurns-1)
	return b.String()
}

// TestChaosRedisLossAndStorageOutage: 50 threads (30 writers, 10 parents
// each with a writer child) on two worker processes and a scheduler.
// Redis (a private redis-server with appendonly yes) is killed with
// SIGKILL and restarted from a copy of its AOF taken half a second
// earlier, which loses the writes of that half second (what appendfsync
// everysec can lose); then the S3 server is stopped for ten seconds.
// Every thread must end, completed, with nothing left in flight; every
// write is there; and for every chain the ledger's own spend is the sum of
// the turns its transcripts record, to the nano-dollar. A child whose
// registration the loss took is restored from the store if it made a turn
// durable; one that had not never runs: its parent is told (thread_lost)
// and completes.
func TestChaosRedisLossAndStorageOutage(t *testing.T) {
	t.Parallel()
	const roots, parents = 40, 10 // and a child per parent: 50 threads
	rds := testenv.NewPrivateRedis(t)
	s3 := testenv.NewPrivateS3(t)
	began := time.Now()
	e := spooltest.New(t, spooltest.Options{Redis: rds.Redis, S3: s3.S3, Files: map[string]string{
		".ai/directives/c/writer.md": directive("writer", `turns="10" spend="1.0"`, fsPerms, `<success>done</success>`),
		".ai/directives/c/parent.md": directive("parent", `turns="10" spend="1.0"`, spawnPerms, `<success>done</success>`),
		"scripts/chaos.yaml":         chaosScript() + script("chaos_parent"),
	}})
	e.Orch = e.Orch.WithLogger(quiet())
	port, err := testenv.FreePort()
	require.NoError(t, err)
	metricsAddr := fmt.Sprintf("127.0.0.1:%d", port)
	workers := []*spooltest.Proc{e.StartWorker("--concurrency", "4"), e.StartWorker("--concurrency", "4")}
	sched := e.Start(nil, "scheduler", "--housekeeping-interval", "1s", "--metrics-addr", metricsAddr)

	// The threads start as `spool thread run` starts them (the same
	// bundle, orchestrator.Start), from this process: 40 CLI processes
	// would take longer than the threads.
	ctx := context.Background()
	const model = "script:scripts/chaos.yaml"
	bundle, err := launch.ProjectBundle(ctx, e.Store, e.Project, "", model, nil)
	require.NoError(t, err)
	ids := make([]string, roots)
	for i := range ids {
		dir := "c/writer"
		if i%(roots/parents) == 0 {
			dir = "c/parent"
		}
		rec, err := e.Orch.Start(ctx, orchestrator.StartRequest{Directive: dir, Model: model, Bundle: bundle})
		require.NoError(t, err)
		ids[i] = rec.ThreadID
	}

	// Redis crashes: the AOF as it was half a second before the kill is
	// all that is left.
	time.Sleep(1500 * time.Millisecond)
	finishedBefore := countFinished(t, e, ids)
	aof := rds.CopyAOF(t)
	time.Sleep(500 * time.Millisecond)
	rds.Kill()
	crashedAt := time.Since(began)
	require.NoError(t, rds.RestoreAOF(aof))
	require.NoError(t, rds.Start(), rds.LogTail())
	finishedAfterRestore := countFinished(t, e, ids)

	// Then the blob store goes away for ten seconds.
	time.Sleep(2 * time.Second)
	s3.Stop()
	time.Sleep(10 * time.Second)
	require.NoError(t, s3.Start())

	final := e.Wait(ids, 90*time.Second)
	var kids []string
	lost, lostRan := 0, 0
	for _, id := range ids {
		if final[id].Directive != "c/parent" {
			continue
		}
		cs, err := e.Orch.Children(ctx, id)
		require.NoError(t, err)
		for _, c := range cs {
			kids = append(kids, c.ThreadID)
		}
		if len(cs) == 0 {
			require.Contains(t, final[id].Result, "thread_lost", "%s: a parent without its child was told", id)
			lost++
			lostRan += lostChildSegments(t, e, id)
		}
	}
	require.Zero(t, lostRan, "a lost child that left segments is restored from them, not written off")
	for id, rec := range e.Wait(kids, 90*time.Second) {
		final[id] = rec
	}
	settled := time.Since(began)

	var turns, activations int
	var spend int64
	for id, rec := range final {
		activations += int(rec.Activation)
		require.Equal(t, thread.StatusCompleted, rec.Status, "%s: %+v", id, rec.Error)
		if rec.Directive == "c/writer" {
			require.Equal(t, chaosTurns, rec.Cost.Turns, id)
			// Every write is there.
			for i := 1; i < chaosTurns; i++ {
				data, err := e.Store.Get(ctx, blobkey.WorkspaceFile(rec.TreeID(), fmt.Sprintf("%s/part%d.txt", id, i)))
				require.NoError(t, err, "%s part %d", id, i)
				require.Equal(t, fmt.Sprintf("part %d of %s", i, id), string(data))
			}
		}
		// The ledger equals the transcript: each thread is its own chain.
		recorded := recordedSpend(t, e, id)
		entry, err := e.Orch.LedgerEntry(ctx, rec.LedgerID())
		require.NoError(t, err)
		require.Equal(t, recorded, entry.OwnNano, "%s: ledger own %d nano-USD, transcript %d", id, entry.OwnNano, recorded)
		require.Zero(t, entry.OverrunNano, id)
		require.Equal(t, string(thread.StatusCompleted), entry.Status, id)
		turns += rec.Cost.Turns
		spend += recorded
	}
	// Nothing is left in flight: no active thread, no lease.
	active, err := e.Orch.Active(ctx)
	require.NoError(t, err)
	require.Empty(t, active)
	for id := range final {
		held, err := e.Orch.Housekeeper().LeaseHeld(ctx, id)
		require.NoError(t, err)
		require.False(t, held, id)
	}
	for _, w := range workers {
		require.False(t, w.Exited(), "the workers survive the Redis restart")
	}
	require.False(t, sched.Exited(), "the scheduler survives the Redis restart")

	m := scrapeMetrics(t, metricsAddr)
	t.Logf("chaos: %d threads (%d roots: %d finished before the crash at %s, %d per the restored Redis; %d children, %d lost with Redis, "+
		"leaving %d segments no registry names), "+
		"%d turns, %d activations, %s USD charged = recorded; reconciled: %v; all ended %s after the start (%s after the crash)",
		len(final)+lost, roots, finishedBefore, crashedAt.Round(time.Millisecond), finishedAfterRestore, len(kids)+lost, lost, lostRan, turns, activations,
		strconv.FormatFloat(ledger.FromNano(spend), 'f', 9, 64), m, settled.Round(time.Millisecond), (settled - crashedAt).Round(time.Millisecond))
	require.Less(t, settled, 2*time.Minute)
}

// lostChildSegments counts the transcript segments of the children a
// parent's transcript says it started (child_spawned) and the registry
// lost: what they ran before Redis forgot them.
func lostChildSegments(t *testing.T, e *spooltest.Env, parent string) int {
	t.Helper()
	n := 0
	for _, ev := range events(t, e, parent) {
		var p transcript.ChildSpawned
		if ev.Type != transcript.TypeChildSpawned || ev.Decode(&p) != nil {
			continue
		}
		segs, err := e.Store.List(context.Background(), blobkey.Segments(p.ChildID))
		require.NoError(t, err)
		n += len(segs)
	}
	return n
}

func countFinished(t *testing.T, e *spooltest.Env, ids []string) int {
	t.Helper()
	recs, err := e.Orch.Records(context.Background(), ids)
	if err != nil {
		return -1
	}
	n := 0
	for _, r := range recs {
		if r.Status.Terminal() {
			n++
		}
	}
	return n
}

// recordedSpend is the sum of the turn spends a thread's transcript
// records, in nano-USD.
func recordedSpend(t *testing.T, e *spooltest.Env, id string) int64 {
	t.Helper()
	var sum int64
	for _, p := range payloads[transcript.CognitionOut](t, events(t, e, id), transcript.TypeCognitionOut) {
		n, err := ledger.ToNano(p.Spend)
		require.NoError(t, err)
		sum += n
	}
	return sum
}

// scrapeMetrics reads the spool_reconciled_total series of a /metrics.
func scrapeMetrics(t *testing.T, addr string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, m := range regexp.MustCompile(`(?m)^spool_reconciled_total\{kind="([^"]+)"\} (\S+)$`).FindAllStringSubmatch(string(b), -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		out[m[1]] = v
	}
	return out
}

// TestWorkerRechargesTurnsRedisLost: Redis restarts from an AOF copied
// after a thread's first turn, while the thread runs its fourth (a
// four-second tool), so the registry and the ledger forget turns two and
// three, whose segments are durable. With no scheduler running, the
// worker that recovers the thread applies the lost charges again from
// the transcript: the ledger's own spend equals the transcript's.
func TestWorkerRechargesTurnsRedisLost(t *testing.T) {
	t.Parallel()
	rds := testenv.NewPrivateRedis(t)
	e := spooltest.New(t, spooltest.Options{Redis: rds.Redis, Files: map[string]string{
		".ai/directives/c/lossy.md": directive("lossy", `turns="8" spend="1.0"`, fsPerms+`<execute><tool>c/nap</tool></execute>`, `<success>done</success>`),
		".ai/tools/c/nap.sh":        "#!/bin/sh\nsleep 4\necho '{\"output\": \"napped\"}'\n",
		"scripts/lossy.yaml":        script("lossy"),
	}})
	e.Orch = e.Orch.WithLogger(quiet())
	w := e.StartWorker("--concurrency", "1")
	ctx := context.Background()
	id := startThread(t, e, "c/lossy", "--model", "script:scripts/lossy.yaml")

	turns := func() int {
		r, err := e.Orch.Record(ctx, id)
		if err != nil {
			return -1
		}
		return r.Cost.Turns
	}
	require.Eventually(t, func() bool { return turns() >= 1 }, time.Minute, 5*time.Millisecond)
	aof := rds.CopyAOF(t)
	require.Less(t, turns(), 2, "copied before the second turn")
	require.Eventually(t, func() bool { return turns() >= 3 }, time.Minute, 20*time.Millisecond)
	time.Sleep(time.Second) // the fourth turn's tool runs
	rds.Kill()
	require.NoError(t, rds.RestoreAOF(aof))
	require.NoError(t, rds.Start(), rds.LogTail())
	require.Less(t, turns(), 2, "the restored Redis forgot turns two and three")

	final := e.Wait([]string{id}, 90*time.Second)[id]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	entry, err := e.Orch.LedgerEntry(ctx, final.LedgerID())
	require.NoError(t, err)
	require.Equal(t, recordedSpend(t, e, id), entry.OwnNano, "the ledger equals the transcript")
	require.Contains(t, w.Log(), "recharged turns the ledger lost")
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
