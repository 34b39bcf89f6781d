package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// failoverScript: a parent starts a child and waits for it, then naps
// three seconds in a tool (the window in which the test kills the
// master) and answers; the child writes three files in three turns and
// answers.
const failoverScript = `context_window: 200000
price: {input_per_mtok: 3.00, output_per_mtok: 15.00}
latency: 1s
directives:
  "f/parent":
    - tool_calls: [{tool: rye/agent/threads/thread_directive, input: {directive_name: f/kid}}]
      usage: {input: 50, output: 5}
    - tool_calls: [{tool: f/nap, input: {}}]
      usage: {input: 60, output: 6}
    - text: "parent done"
      usage: {input: 70, output: 7}
  "f/kid":
    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: "{{.thread_id}}/1.txt", content: "one"}}]
      usage: {input: 101, output: 11}
    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: "{{.thread_id}}/2.txt", content: "two"}}]
      usage: {input: 202, output: 22}
    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: "{{.thread_id}}/3.txt", content: "three"}}]
      usage: {input: 303, output: 33}
    - text: "kid wrote three files"
      usage: {input: 404, output: 44}
`

// TestSentinelFailoverRestoresLostChild: a real Sentinel failover that
// loses acknowledged writes. The replica is frozen as soon as the parent
// runs, so everything after never reaches it: the child's registration,
// its four turns and their charges, its end, the parent's wake-up. Then
// the master is killed and the Sentinel promotes the replica. The child's
// signed transcript and thread.json are in the store; the registry and
// the ledger no longer know it. The parent, recovered, and housekeeping
// (which sees Redis's new run_id) restore the child from the store
// instead of telling the parent thread_lost: the parent completes with
// the child's own answer, the child is not run again (one child, each
// file written by one call), and every ledger entry equals its
// transcript, the parent's holding the child's spend.
func TestSentinelFailoverRestoresLostChild(t *testing.T) {
	t.Parallel()
	ps := testenv.NewPrivateSentinel(t, time.Second)
	e := spooltest.New(t, spooltest.Options{Redis: ps.Redis, Files: map[string]string{
		".ai/directives/f/parent.md": directive("parent", `turns="6" spend="1.0"`, spawnPerms+`<execute><tool>f/nap</tool></execute>`,
			`<success>done</success>`),
		".ai/directives/f/kid.md": directive("kid", `turns="6" spend="1.0"`, fsPerms, `<success>done</success>`),
		".ai/tools/f/nap.sh":      "#!/bin/sh\nsleep 3\necho '{\"output\": \"napped\"}'\n",
		"scripts/failover.yaml":   failoverScript,
	}})
	e.Orch = e.Orch.WithLogger(quiet())
	workers := []*spooltest.Proc{e.StartWorker("--concurrency", "4"), e.StartWorker("--concurrency", "4")}
	sched := e.Start(nil, "scheduler", "--housekeeping-interval", "1s")
	ctx := context.Background()
	const model = "script:scripts/failover.yaml"
	bundle, err := launch.ProjectBundle(ctx, e.Store, e.Project, "", model, nil)
	require.NoError(t, err)
	rec, err := e.Orch.Start(ctx, orchestrator.StartRequest{Directive: "f/parent", Model: model, Bundle: bundle})
	require.NoError(t, err)
	parent := rec.ThreadID

	// The parent runs (its first model call takes 1 s): the replica has
	// all of it, and from now on nothing more.
	master := ps.Master.Client(t)
	status := func(id string) thread.Status {
		st, _ := master.HGet(ctx, e.Keys.Thread(id), "status").Result()
		return thread.Status(st)
	}
	require.Eventually(t, func() bool { return status(parent) == thread.StatusRunning }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, ps.InSync(ctx))
	require.NoError(t, ps.CutOffReplica(ctx))
	frozen := time.Now()
	// The parent's first model call (1 s) is still running: its child is
	// not registered yet, so the replica never gets it.
	early, err := master.SCard(ctx, e.Keys.Children(parent)).Result()
	require.NoError(t, err)
	require.Zero(t, early, "the replica was cut off after the parent had started its child: the machine is too slow for this test's 1 s model call")

	// The child registers, runs and ends, on the master alone.
	var kid string
	require.Eventually(t, func() bool {
		kids, err := master.SMembers(ctx, e.Keys.Children(parent)).Result()
		if err != nil || len(kids) == 0 {
			return false
		}
		kid = kids[0]
		if status(kid) != thread.StatusCompleted {
			return false
		}
		tj, err := e.Store.Get(ctx, blobkey.ThreadJSON(kid))
		return err == nil && strings.Contains(string(tj), `"status":"completed"`)
	}, 30*time.Second, 10*time.Millisecond)
	require.NotEqual(t, thread.StatusCompleted, status(parent), "the parent naps")

	// The master dies; the Sentinel promotes the replica, which never got
	// the child.
	promoted, took, err := ps.LoseMaster(ctx)
	require.NoError(t, err)
	require.Equal(t, ps.Replica.Addr, promoted)
	failedOver := time.Now()
	killed := failedOver.Add(-took)
	newMaster := ps.Replica.Client(t)
	// The failover lost the child's registration and ledger entry: the
	// new master has neither, or (housekeeping can be that quick) has
	// them restored from the store, which the record says.
	n, err := newMaster.Exists(ctx, e.Keys.Thread(kid), e.Keys.Ledger(kid)).Result()
	require.NoError(t, err)
	if n > 0 {
		at, err := newMaster.HGet(ctx, e.Keys.Thread(kid), registry.RestoredField).Result()
		require.NoError(t, err, "a child on the new master is one restored from the store, not one replicated")
		require.NotEmpty(t, at, "a child on the new master is one restored from the store, not one replicated")
	}

	final := e.Wait([]string{parent}, 2*time.Minute)[parent]
	settled := time.Now()
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, "parent done", final.Result)
	answers := payloads[transcript.ToolCallResult](t, events(t, e, parent), transcript.TypeToolCallResult)
	require.NotEmpty(t, answers)
	require.Equal(t, "rye/agent/threads/thread_directive", answers[0].Tool)
	require.False(t, answers[0].IsError, answers[0].Output)
	require.NotContains(t, answers[0].Output, "thread_lost")
	require.Contains(t, answers[0].Output, "kid wrote three files", "the child's own answer")

	got, err := e.Orch.Record(ctx, kid)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCompleted, got.Status)
	require.NotEmpty(t, got.Extra[registry.RestoredField], "restored from the store")
	require.Equal(t, parent, got.ParentID)

	// Nothing ran twice: one child, each of its files written by one call.
	kids := children(t, e, parent)
	require.Equal(t, []string{kid}, threadIDs(kids))
	spawned := payloads[transcript.ChildSpawned](t, events(t, e, parent), transcript.TypeChildSpawned)
	require.Len(t, spawned, 1)
	calls := payloads[transcript.ToolCallResult](t, events(t, e, kid), transcript.TypeToolCallResult)
	require.Len(t, calls, 3)
	for i, want := range []string{"one", "two", "three"} {
		data, err := e.Store.Get(ctx, blobkey.WorkspaceFile(got.TreeID(), fmt.Sprintf("%s/%d.txt", kid, i+1)))
		require.NoError(t, err)
		require.Equal(t, want, string(data))
	}

	// The ledger equals the transcripts, on both levels.
	own := map[string]int64{}
	for _, id := range []string{parent, kid} {
		entry, err := e.Orch.LedgerEntry(ctx, id)
		require.NoError(t, err)
		own[id] = recordedSpend(t, e, id)
		require.Equal(t, own[id], entry.OwnNano, id)
		require.Equal(t, string(thread.StatusCompleted), entry.Status, id)
	}
	entry, err := e.Orch.LedgerEntry(ctx, parent)
	require.NoError(t, err)
	require.Equal(t, own[parent]+own[kid], entry.ActualNano, "the parent's entry holds the child's spend")

	logs := sched.Log()
	for _, w := range workers {
		logs += w.Log()
		require.False(t, w.Exited(), "the workers survive the failover")
	}
	require.False(t, sched.Exited(), "the scheduler survives the failover")
	require.Contains(t, logs, "restored a thread Redis lost from its transcript")
	t.Logf("sentinel failover: replica frozen %s before the kill, promoted %s after it; the parent completed %s after the failover, "+
		"with its child restored (ledger: parent %d + child %d nano-USD, equal to the transcripts)",
		killed.Sub(frozen).Round(time.Millisecond), failedOver.Sub(killed).Round(time.Millisecond),
		settled.Sub(failedOver).Round(time.Millisecond), own[parent], own[kid])
}

// waitChaos waits for the threads ids to end, as Env.Wait does; when
// they do not within timeout it fails the test with where each that is
// still unfinished stands (threadStanding).
func waitChaos(t *testing.T, e *spooltest.Env, ids []string, timeout time.Duration, procs []*spooltest.Proc) map[string]*registry.Record {
	t.Helper()
	res, err := e.Orch.Wait(context.Background(), ids, timeout)
	if err == nil {
		return res
	}
	var stuck []string
	for _, id := range ids {
		rec, rerr := e.Orch.Record(context.Background(), id)
		switch {
		case rerr != nil:
			stuck = append(stuck, id+": "+rerr.Error())
		case !rec.Status.Terminal():
			stuck = append(stuck, threadStanding(e, rec, procs))
		}
	}
	t.Fatalf("wait for %d threads: %v; unfinished:\n%s", len(ids), err, strings.Join(stuck, "\n"))
	return nil
}

// requireChaosCompleted fails the chaos test when rec's thread did not
// complete, with where it stands (threadStanding).
func requireChaosCompleted(t *testing.T, e *spooltest.Env, rec *registry.Record, procs []*spooltest.Proc) {
	t.Helper()
	if rec.Status != thread.StatusCompleted {
		t.Fatal(threadStanding(e, rec, procs))
	}
}

// threadStanding says where rec's thread stands: which thread it is (a
// root, or whose child, and whether it was restored from the store), its
// status and error (code and message in full), its record's other
// fields, the children it has and how they stand, its transcript's last
// events and what the processes logged about it: a failure on a loaded
// machine is read from that message alone.
func threadStanding(e *spooltest.Env, rec *registry.Record, procs []*spooltest.Proc) string {
	who := "root"
	if rec.ParentID != "" {
		who = "child of " + rec.ParentID
	}
	if at := rec.Extra[registry.RestoredField]; at != "" {
		who += ", restored from the store at " + at
	}
	how := "no error"
	if rec.Error != nil {
		how = rec.Error.Code + ": " + rec.Error.Message
	}
	var last []string
	tr, err := transcript.Read(context.Background(), e.Store, rec.ThreadID, e.Keyring, transcript.Strict)
	if err != nil {
		last = append(last, "transcript does not read: "+err.Error())
	} else {
		for _, ev := range tr.Events[max(len(tr.Events)-8, 0):] {
			last = append(last, fmt.Sprintf("%s %s", ev.Type, ev.Payload))
		}
	}
	kids, err := e.Orch.Children(context.Background(), rec.ThreadID)
	if err != nil {
		last = append(last, "children not read: "+err.Error())
	}
	for _, k := range kids {
		last = append(last, fmt.Sprintf("child %s is %s (version %d, %v)", k.ThreadID, k.Status, k.Version, k.Extra))
	}
	var logged []string
	for _, p := range procs {
		for line := range strings.Lines(p.Log()) {
			if strings.Contains(line, rec.ThreadID) {
				logged = append(logged, strings.TrimSpace(line))
			}
		}
	}
	return fmt.Sprintf("thread %s (%s, %s) is %s (version %d, activation %d, turns %d, %v): %s\n"+
		"transcript's last events, then its children:\n  %s\nlogged about it:\n  %s",
		rec.ThreadID, rec.Directive, who, rec.Status, rec.Version, rec.Activation, rec.Cost.Turns, rec.Extra, how,
		strings.Join(last, "\n  "), strings.Join(logged[max(len(logged)-40, 0):], "\n  "))
}

// loseGraph naps two seconds in a tool step, then runs one g/item child
// and returns what it said.
const loseGraph = `limits: {spawns: 5}
config:
  start: nap
  nodes:
    nap:
      action: {tool: g/nap, params: {}}
      next: solo
    solo:
      action: {directive: g/item, inputs: {n: solo}}
      assign: {solo: "${result.outputs.value}"}
      next: done
    done:
      type: return
      output: {solo: "${state.solo}"}
`

// TestGraphRestoresLostChild: Redis loses every write since a graph run
// began (rolled back to a snapshot taken while its first step naps),
// while the child its second step started is in its second turn: the
// child's registration and first turn are gone from Redis, its first
// segment and thread.json are in the store. The run, recovered from its
// checkpoint, finds its planned child unregistered and starts it again
// (the walker's settle); the start adopts the child restored from the
// store, which goes on from its first turn instead of starting over under
// its own id (where its transcript would refuse it). The run completes
// with the child's answer, the child ran each turn once, and the ledger
// holds its turns once.
func TestGraphRestoresLostChild(t *testing.T) {
	t.Parallel()
	e, run, kid := loseGraphChild(t, "g/lose", loseGraph, func(*spooltest.Env, string) bool { return true })
	final := e.Wait([]string{run}, 2*time.Minute)[run]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, map[string]any{"solo": "item solo"}, final.Outputs)
	checkRestoredChild(t, e, kid)
	checkRunExact(t, e, final, 1)
}

// loseGraphChild runs graph name (body: its graph file, whose g/nap tool
// naps two seconds) on a worker, snapshots Redis while the run first
// runs, before any child, and rolls Redis back once the run's first child
// has a durable segment and ready (given the run's id) says the run is
// where the test wants it: Redis has lost the child, the store has its
// first turn. It returns the env, the run's id and the child's.
func loseGraphChild(t *testing.T, name, body string, ready func(e *spooltest.Env, run string) bool) (*spooltest.Env, string, string) {
	t.Helper()
	files := walkProject("1500ms", map[string]string{name: body})
	files[".ai/tools/g/nap.sh"] = "#!/bin/sh\nsleep 2\necho '{\"output\": \"napped\"}'\n"
	path := ".ai/graphs/" + name + ".yaml"
	files[path] = strings.Replace(files[path], walkPerms, walkPerms+"  - rye.execute.tool.g.*\n", 1)
	e := spooltest.New(t, spooltest.Options{Files: files, LeaseTTL: 2 * time.Second})
	e.Orch = e.Orch.WithLogger(quiet())
	e.Start([]string{"SPOOL_RECOVER_INTERVAL=500ms"}, "worker", "--concurrency", "4")
	ctx := context.Background()
	res := e.Spool("graph", "run", name, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var run registry.Record
	res.JSON(t, &run)

	require.Eventually(t, func() bool {
		r, err := e.Orch.Record(ctx, run.ThreadID)
		return err == nil && r.Status == thread.StatusRunning
	}, 30*time.Second, 10*time.Millisecond)
	snap := e.Redis.Snapshot(t) // the run naps; no child yet
	var kid string
	require.Eventually(t, func() bool {
		kids, err := e.Orch.Children(ctx, run.ThreadID)
		if err != nil || len(kids) == 0 {
			return false
		}
		kid = kids[0].ThreadID
		segs, err := e.Store.List(ctx, blobkey.Segments(kid))
		return err == nil && len(segs) >= 1 && ready(e, run.ThreadID)
	}, 30*time.Second, 10*time.Millisecond)
	snap.Rollback(t) // the child is in its second model call
	_, err := e.Orch.Record(ctx, kid)
	require.ErrorIs(t, err, registry.ErrNotFound, "Redis lost the child")
	return e, run.ThreadID, kid
}

// checkRestoredChild checks the g/item child kid, which Redis lost after
// its first turn: restored from the store, completed, each of its two
// turns run once (its file written once), and its ledger entry equal to
// its transcript.
func checkRestoredChild(t *testing.T, e *spooltest.Env, kid string) {
	t.Helper()
	ctx := context.Background()
	got, err := e.Orch.Record(ctx, kid)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCompleted, got.Status)
	require.NotEmpty(t, got.Extra[registry.RestoredField], "restored from the store")
	require.Equal(t, 2, got.Cost.Turns)
	writes := payloads[transcript.ToolCallResult](t, events(t, e, kid), transcript.TypeToolCallResult)
	require.Len(t, writes, 1, "its file written once")
	entry, err := e.Orch.LedgerEntry(ctx, kid)
	require.NoError(t, err)
	require.Equal(t, recordedSpend(t, e, kid), entry.OwnNano)
}

// loseWaitGraph starts one g/item child async, naps two seconds, and
// joins the child in a wait node.
const loseWaitGraph = `limits: {spawns: 5}
config:
  start: nap1
  nodes:
    nap1:
      action: {tool: g/nap, params: {}}
      next: fan
    fan:
      action: {directive: g/item, inputs: {n: solo}, async: true}
      assign: {ids: ["${result.thread_id}"]}
      next: nap2
    nap2:
      action: {tool: g/nap, params: {}}
      next: join
    join:
      type: wait
      threads: "${state.ids}"
      collect: joined
      next: done
    done:
      type: return
      output: {solo: "${state.joined.0.outputs.value}", n: "${state.joined | length}"}
`

// TestGraphWaitRestoresLostChild: Redis loses every write since a graph
// run began (rolled back to a snapshot taken while its first step naps)
// after the run's async step started a child and made that durable, while
// the child is in its second turn: the child's registration and first
// turn are gone from Redis, its first segment and thread.json are in the
// store. The run's wait node finds the child missing and restores it from
// the store (as a thread's wait does) instead of settling it thread_lost;
// the child goes on from its first turn, each turn runs once, and the
// ledger holds its turns once.
func TestGraphWaitRestoresLostChild(t *testing.T) {
	t.Parallel()
	// Rolled back once the run's start of the child is durable.
	fanDone := func(e *spooltest.Env, run string) bool {
		for _, sc := range payloads[transcript.StepCompleted](t, events(t, e, run), transcript.TypeStepCompleted) {
			if sc.Node == "fan" {
				return true
			}
		}
		return false
	}
	e, run, kid := loseGraphChild(t, "g/losewait", loseWaitGraph, fanDone)
	final := e.Wait([]string{run}, 2*time.Minute)[run]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, map[string]any{"solo": "item solo", "n": float64(1)}, final.Outputs)
	checkRestoredChild(t, e, kid)
	ctx := context.Background()
	entry, err := e.Orch.LedgerEntry(ctx, kid)
	require.NoError(t, err)
	runEntry, err := e.Orch.LedgerEntry(ctx, run)
	require.NoError(t, err)
	require.Equal(t, recordedSpend(t, e, run)+entry.OwnNano, runEntry.ActualNano, "the run's entry holds the child's spend once")
}

// commitLatency commits n times to thread id (a registry commit: one
// script, as a checkpoint's), each followed by WAIT for one replica when
// wait is set, and returns the sorted latencies.
func commitLatency(t *testing.T, reg *registry.Registry, c *redis.Client, id string, n int, wait bool) []time.Duration {
	t.Helper()
	ctx := context.Background()
	out := make([]time.Duration, n)
	for i := range out {
		start := time.Now()
		_, err := reg.Commit(ctx, id, 0, registry.Changes{Fields: map[string]string{"probe": strconv.Itoa(i)}})
		require.NoError(t, err)
		if wait {
			acked, err := c.Wait(ctx, 1, time.Second).Result()
			require.NoError(t, err)
			require.Equal(t, int64(1), acked, "the replica acknowledges the commit")
		}
		out[i] = time.Since(start)
	}
	slices.Sort(out)
	return out
}

// quantile is the q-quantile of sorted ds.
func quantile(ds []time.Duration, q float64) time.Duration {
	return ds[min(len(ds)-1, int(q*float64(len(ds))))]
}

// TestSentinelWaitAndMinReplicas says, on a real master, replica and
// Sentinel, what min-replicas-to-write and WAIT buy a spool deployment
// and what they cost (docs: the scheduler package doc's "What
// replication acknowledges"):
//
//   - cost: the latency of a registry commit (one script, as a
//     checkpoint's) alone, with min-replicas-to-write 1, and followed by
//     WAIT 1 on the same connection, logged with their quantiles;
//   - min-replicas-to-write 1, min-replicas-max-lag 1: once the replica
//     has acknowledged nothing for about a second, the master refuses
//     every write (NOREPLICAS): what a failover can lose is bounded by
//     that window, at the price of Redis refusing writes, which spool
//     retries as an outage, while no replica keeps up;
//   - WAIT: a commit the replica acknowledged survives the failover; one
//     it did not (WAIT answers 0) is acknowledged by the master and lost
//     by the failover, the loss spool restores from the store.
func TestSentinelWaitAndMinReplicas(t *testing.T) {
	t.Parallel()
	ps := testenv.NewPrivateSentinel(t, time.Second)
	ctx := context.Background()
	// One connection, so that WAIT waits for the commit just sent on it.
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: testenv.PrivateSentinelMaster,
		SentinelAddrs: []string{ps.Addr}, PoolSize: 1, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	reg, err := registry.New(registry.Config{Client: c, Keys: keyspace.New(ps.Namespace)})
	require.NoError(t, err)
	const id = "d/probe-1"
	_, err = reg.Register(ctx, registry.NewThread{ThreadID: id, Directive: "d/probe", Limits: thread.DefaultLimits()})
	require.NoError(t, err)
	master := ps.Master.Client(t)
	minReplicas := func(n, lag int) {
		require.NoError(t, master.ConfigSet(ctx, "min-replicas-to-write", strconv.Itoa(n)).Err())
		require.NoError(t, master.ConfigSet(ctx, "min-replicas-max-lag", strconv.Itoa(lag)).Err())
	}

	// What each costs: a commit alone, with min-replicas-to-write, and
	// with WAIT.
	const n = 1000
	commitLatency(t, reg, c, id, 100, true) // warm up
	none := commitLatency(t, reg, c, id, n, false)
	minReplicas(1, 10)
	withMin := commitLatency(t, reg, c, id, n, false)
	minReplicas(0, 10)
	withWait := commitLatency(t, reg, c, id, n, true)
	for _, m := range []struct {
		name string
		ds   []time.Duration
	}{{"none", none}, {"min-replicas-to-write 1", withMin}, {"WAIT 1", withWait}} {
		t.Logf("commit latency, %s: p50 %s, p90 %s, p99 %s (%d commits)", m.name, quantile(m.ds, 0.5), quantile(m.ds, 0.9),
			quantile(m.ds, 0.99), len(m.ds))
	}

	// min-replicas-to-write bounds the window of writes a failover can
	// lose: the replica frozen, the master takes writes for about
	// max-lag, then refuses them.
	minReplicas(1, 1)
	ps.Replica.Stop()
	stopped := time.Now()
	var refused error
	accepted := 0
	for time.Since(stopped) < 10*time.Second && refused == nil {
		if _, refused = reg.Commit(ctx, id, 0, registry.Changes{Fields: map[string]string{"probe": "lagging"}}); refused == nil {
			accepted++
			time.Sleep(20 * time.Millisecond)
		}
	}
	window := time.Since(stopped)
	require.Error(t, refused)
	require.Contains(t, refused.Error(), "NOREPLICAS")
	require.Less(t, window, 5*time.Second)
	t.Logf("min-replicas-to-write 1, min-replicas-max-lag 1: the master took %d commits in the %s after the replica froze, then refused: %v",
		accepted, window.Round(time.Millisecond), refused)
	ps.Replica.Cont()
	minReplicas(0, 10)
	require.NoError(t, ps.InSync(ctx))

	// WAIT tells a commit the failover keeps from one it loses.
	kept, err := reg.Commit(ctx, id, 0, registry.Changes{Fields: map[string]string{"probe": "kept"}})
	require.NoError(t, err)
	acked, err := c.Wait(ctx, 1, time.Second).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), acked)
	require.NoError(t, ps.CutOffReplica(ctx))
	lost, err := reg.Commit(ctx, id, 0, registry.Changes{Fields: map[string]string{"probe": "lost"}})
	require.NoError(t, err, "the master acknowledges it")
	acked, err = c.Wait(ctx, 1, 200*time.Millisecond).Result()
	require.NoError(t, err)
	require.Zero(t, acked, "no replica has it")
	_, _, err = ps.LoseMaster(ctx)
	require.NoError(t, err)
	var got *registry.Record
	require.Eventually(t, func() bool {
		got, err = reg.Get(ctx, id)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, kept, got.Version, "the commit WAIT acknowledged survived; the one after it (version %d) is lost", lost)
	require.Equal(t, "kept", got.Extra["probe"])
}

// chaosFailoverScript: a parent starts two children one after the other,
// each waited for, and answers; a child marks three side effects (x/mark
// appends its id to $HOME/effects.log), one a turn, and answers. Every
// model call takes 400 ms.
const chaosFailoverScript = `context_window: 200000
price: {input_per_mtok: 3.00, output_per_mtok: 15.00}
latency: 400ms
directives:
  "x/parent":
    - tool_calls: [{tool: rye/agent/threads/thread_directive, input: {directive_name: x/kid}}]
      usage: {input: 50, output: 5}
    - tool_calls: [{tool: rye/agent/threads/thread_directive, input: {directive_name: x/kid}}]
      usage: {input: 60, output: 6}
    - text: "parent done"
      usage: {input: 70, output: 7}
  "x/kid":
    - tool_calls: [{tool: x/mark, input: {}}]
      usage: {input: 101, output: 11}
    - tool_calls: [{tool: x/mark, input: {}}]
      usage: {input: 202, output: 22}
    - tool_calls: [{tool: x/mark, input: {}}]
      usage: {input: 303, output: 33}
    - text: "kid done"
      usage: {input: 404, output: 44}
`

// TestSentinelFailoversChaos: four Sentinel failovers 6.5 s apart, each
// losing the 1.5 s of acknowledged writes before it, under trees of a
// parent and two children started in batches just before each. Every
// root completes; every child the loss took after it made a turn durable
// is restored (none of them is thread_lost); a child is thread_lost only
// when it left no segment; no turn that runs again after a lost first
// claim starts a twin of its child; every thread's ledger entry equals
// its transcript; and the figures are logged: children expected and
// found, restored and lost, side effects repeated, recovery times.
func TestSentinelFailoversChaos(t *testing.T) {
	t.Parallel()
	ps := testenv.NewPrivateSentinel(t, time.Second)
	markTool := "#!/bin/sh\necho \"$SPOOL_THREAD_ID\" >> \"$HOME/effects.log\"\necho '{\"output\": \"marked\"}'\n"
	e := spooltest.New(t, spooltest.Options{Redis: ps.Redis, Files: map[string]string{
		".ai/directives/x/parent.md": directive("parent", `turns="6" spend="1.0"`, spawnPerms+`<execute><tool>x/mark</tool></execute>`,
			`<success>done</success>`),
		".ai/directives/x/kid.md": directive("kid", `turns="6" spend="1.0"`, `<execute><tool>x/mark</tool></execute>`, `<success>done</success>`),
		".ai/tools/x/mark.sh":     markTool,
		"scripts/chaos.yaml":      chaosFailoverScript,
	}})
	e.Orch = e.Orch.WithLogger(quiet())
	fast := []string{"SPOOL_RECOVER_INTERVAL=500ms"}
	workers := []*spooltest.Proc{e.Start(fast, "worker", "--concurrency", "8"), e.Start(fast, "worker", "--concurrency", "8")}
	sched := e.Start(fast, "scheduler", "--housekeeping-interval", "1s")
	procs := append([]*spooltest.Proc{sched}, workers...)
	// A process that cannot reach Redis as it starts exits (with the
	// error): the first failover waits until each has connected, which
	// a loaded machine may take seconds to do.
	for _, p := range procs {
		require.Eventually(t, func() bool {
			return strings.Contains(p.Log(), "worker started") || strings.Contains(p.Log(), "scheduler started") || p.Exited()
		}, time.Minute, 50*time.Millisecond)
		require.False(t, p.Exited(), "exited as it started:\n%s", p.Log())
	}
	ctx := context.Background()
	const model = "script:scripts/chaos.yaml"
	bundle, err := launch.ProjectBundle(ctx, e.Store, e.Project, "", model, nil)
	require.NoError(t, err)

	const failovers, batch, interval = 4, 6, 6500 * time.Millisecond
	var roots []string
	var fos []testenv.Failover
	began := time.Now()
	for range failovers {
		round := time.Now()
		for range batch {
			rec, err := e.Orch.Start(ctx, orchestrator.StartRequest{Directive: "x/parent", Model: model, Bundle: bundle})
			require.NoError(t, err)
			roots = append(roots, rec.ThreadID)
		}
		f, err := ps.FailOver(ctx, 1500*time.Millisecond) // the roots are on the replica; what follows, for 1.5 s, is not
		require.NoError(t, err)
		fos = append(fos, f)
		time.Sleep(time.Until(round.Add(interval)))
	}
	lastFailover := time.Now()
	final := waitChaos(t, e, roots, 3*time.Minute, procs)
	settled := time.Now()

	var kids, named, lost, lostRan, restored, parentsLost int
	var threads, inRegistry []string
	namedIDs := map[string]bool{}
	for _, id := range roots {
		requireChaosCompleted(t, e, final[id], procs)
		threads = append(threads, id)
		spawned := payloads[transcript.ChildSpawned](t, events(t, e, id), transcript.TypeChildSpawned)
		named += len(spawned)
		lostHere := 0
		for _, a := range payloads[transcript.ToolCallResult](t, events(t, e, id), transcript.TypeToolCallResult) {
			if strings.Contains(a.Output, "thread_lost") {
				lostHere++
			}
		}
		lost += lostHere
		if lostHere > 0 {
			parentsLost++
		}
		for _, s := range spawned {
			namedIDs[s.ChildID] = true
		}
		for _, c := range children(t, e, id) {
			kids++
			inRegistry = append(inRegistry, c.ThreadID)
			threads = append(threads, c.ThreadID)
			if c.Extra[registry.RestoredField] != "" {
				restored++
			}
		}
		for _, s := range spawned {
			if _, err := e.Orch.Record(ctx, s.ChildID); err != nil {
				segs, err := e.Store.List(ctx, blobkey.Segments(s.ChildID))
				require.NoError(t, err)
				lostRan += len(segs)
			}
		}
	}
	require.Zero(t, lostRan, "a lost child that made a turn durable is restored, not written off")
	// No twin: every child in the registry is one a transcript names. A
	// named child the registry lacks was lost before its first
	// checkpoint (it left no segment: lostRan), and its parent was told.
	for _, id := range inRegistry {
		require.True(t, namedIDs[id], "child %s in the registry is named by no parent's transcript", id)
	}
	for _, rec := range waitChaos(t, e, threads, 2*time.Minute, procs) {
		requireChaosCompleted(t, e, rec, procs)
	}

	// The ledger equals the transcripts, thread by thread.
	var spend int64
	for _, id := range threads {
		entry, err := e.Orch.LedgerEntry(ctx, id)
		require.NoError(t, err)
		recorded := recordedSpend(t, e, id)
		require.Equal(t, recorded, entry.OwnNano, "%s: ledger own %d nano-USD, transcript %d", id, entry.OwnNano, recorded)
		spend += recorded
	}
	// Side effects: each child that ran marks three times.
	log, err := os.ReadFile(filepath.Join(filepath.Dir(e.Project), "effects.log"))
	require.NoError(t, err)
	marks := map[string]int{}
	for _, line := range strings.Fields(string(log)) {
		marks[line]++
	}
	total, repeated := 0, 0
	for _, n := range marks {
		total += n
		repeated += max(n-3, 0)
	}
	for _, p := range procs {
		require.False(t, p.Exited(), "every process survives the failovers")
	}
	var recov []string
	for _, f := range fos {
		recov = append(recov, fmt.Sprintf("promoted %s, resynced %s", f.Promoted.Round(time.Millisecond), f.Resynced.Round(time.Millisecond)))
	}
	t.Logf("sentinel chaos: %d failovers (%s); %d roots, all completed; children expected %d, named by the transcripts %d, "+
		"in the registry %d (%d restored from the store), thread_lost %d (in %d parents; lost before their first checkpoint: "+
		"segments of lost children %d); ledger = transcripts for all %d threads (%s USD); side effects %d for %d children, "+
		"%d repeated; all settled %s after the last failover (%s after the first batch)",
		len(fos), strings.Join(recov, "; "), len(roots), 2*len(roots), named, kids, restored, lost, parentsLost, lostRan,
		len(threads), strconv.FormatFloat(ledger.FromNano(spend), 'f', 9, 64), total, len(marks), repeated,
		settled.Sub(lastFailover).Round(time.Millisecond), settled.Sub(began).Round(time.Millisecond))
	require.Positive(t, restored, "the failovers took children that had run")
}
