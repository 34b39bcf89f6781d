package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/thread"
)

// A running thread with no lease and no task (its worker died, its task
// is gone) is re-enqueued by housekeeping, once the pass is not held by
// another scheduler.
func TestHousekeepRecoversOrphan(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := e.orch(nil)
	ctx := context.Background()
	rec, err := o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "x"},
		Queue: e.queue, Bundle: e.bundle()})
	require.NoError(t, err)
	id := rec.ThreadID
	insp := asynq.NewInspectorFromRedisClient(e.redis.Client)
	require.NoError(t, insp.DeleteTask(e.asynqQueue(), id), "the start task's id is the thread id")
	claimed := claimDead(t, o, id) // running, and no lease: a dead worker
	require.Equal(t, thread.StatusRunning, claimed.Status)

	s := e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute}, o)
	// Another scheduler holds the pass: nothing is done.
	require.NoError(t, e.redis.Client.Set(ctx, scheduler.HousekeepingLockKey(o.Runtime().Services().Keys), "other", time.Minute).Err())
	res, err := s.Housekeep(ctx)
	require.NoError(t, err)
	require.True(t, res.Skipped)
	require.Empty(t, pendingActivations(t, insp, e.asynqQueue()))

	require.NoError(t, e.redis.Client.Del(ctx, scheduler.HousekeepingLockKey(o.Runtime().Services().Keys)).Err())
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	// (The first pass on this Redis finds no housekeeping marker and
	// reconciles the one thread, which has nothing to repair.)
	require.Equal(t, scheduler.HousekeepingResult{Orphans: 1,
		Reconcile: scheduler.ReconcileResult{Trigger: scheduler.TriggerNoMarker, Threads: 1}}, res)
	require.Equal(t, []queue.Activation{{ThreadID: id, Reason: "recover", Seq: claimed.Version}}, pendingActivations(t, insp, e.asynqQueue()))
	// The lock was released: a second pass runs (and enqueues nothing new).
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.False(t, res.Skipped)
	require.Len(t, pendingActivations(t, insp, e.asynqQueue()), 1)
}

// A pass whose release of the housekeeping lock Redis lost (a failover
// kept the lock and lost its release) does not keep this process's next
// pass waiting out the lock's TTL: the lock under its own token is taken
// again (and released); under another process's it is still skipped.
func TestHousekeepRetakesItsLostLock(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := e.orch(nil)
	ctx := context.Background()
	s := e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute}, o)
	key := scheduler.HousekeepingLockKey(o.Runtime().Services().Keys)

	require.NoError(t, e.redis.Client.Set(ctx, key, scheduler.LockToken(s), time.Minute).Err())
	res, err := s.Housekeep(ctx)
	require.NoError(t, err)
	require.False(t, res.Skipped, "its own lock, whose release was lost, is taken again")
	n, err := e.redis.Client.Exists(ctx, key).Result()
	require.NoError(t, err)
	require.Zero(t, n, "and released after the pass")

	require.NoError(t, e.redis.Client.Set(ctx, key, "other", time.Minute).Err())
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.True(t, res.Skipped, "another process's lock is theirs")
	v, err := e.redis.Client.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, "other", v)
}

func pendingActivations(t *testing.T, insp *asynq.Inspector, q string) []queue.Activation {
	t.Helper()
	tasks, err := insp.ListPendingTasks(q)
	if err != nil {
		return nil // no queue yet
	}
	var out []queue.Activation
	for _, ti := range tasks {
		require.Equal(t, queue.TypeActivate, ti.Type)
		a, err := queue.ParseActivation(asynq.NewTask(ti.Type, ti.Payload))
		require.NoError(t, err)
		out = append(out, a)
	}
	return out
}

// Retention deletes the artifacts of threads that finished before the
// cutoff, and only of those whose tree and chain are no longer active.
func TestRetention(t *testing.T) {
	t.Parallel()
	e := setup(t)
	now := time.Now()
	clk := testenv.NewClock(now.Add(-48 * time.Hour))
	o := e.orch(clk.Now)
	ctx := context.Background()
	bundle := e.bundle()
	start := func(parent string) string {
		t.Helper()
		rec, err := o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "x"},
			Queue: e.queue, Bundle: bundle, ParentID: parent})
		require.NoError(t, err)
		return rec.ThreadID
	}
	run := func(id string) {
		t.Helper()
		claimDead(t, o, id)
	}
	finish := func(id string) {
		t.Helper()
		_, err := o.Runtime().Services().Registry.Transition(ctx, id, thread.StatusCompleted, 0)
		require.NoError(t, err)
	}

	// 48h ago: old finishes A (root), running C (root), running E (root)
	// with a finished child D.
	a, c, ee := start(""), start(""), start("")
	d := start(ee)
	for _, id := range []string{a, c, ee, d} {
		run(id)
	}
	finish(a)
	finish(d)
	// An hour ago: young finished B.
	clk.Set(now.Add(-time.Hour))
	b := start("")
	run(b)
	finish(b)
	clk.Set(now)

	files := map[string][]string{}
	for _, id := range []string{a, b, c, d, ee} {
		files[id] = putArtifacts(t, e.store, id, id != d)
	}
	s := e.scheduler(scheduler.Config{Retention: 24 * time.Hour}, o)
	res, err := s.Housekeep(ctx)
	require.NoError(t, err)
	// (C and E are running without a lease: orphans to recover too.)
	require.Equal(t, [2]int{1, len(files[a])}, [2]int{res.Retained, res.Objects})
	requireGone(t, e.store, files[a])
	for _, id := range []string{b, c, d, ee} {
		requirePresent(t, e.store, files[id])
	}
	rec, err := o.Record(ctx, a)
	require.NoError(t, err)
	require.NotEmpty(t, rec.Extra[scheduler.ArtifactsDeletedField], "the record is kept and marked")
	require.Equal(t, thread.StatusCompleted, rec.Status)

	// Nothing more to do while E runs.
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 0}, [2]int{res.Retained, res.Objects})

	// E finished 30h ago: its tree (E and D) goes; C (running) and B
	// (young) stay.
	clk.Set(now.Add(-30 * time.Hour))
	finish(ee)
	clk.Set(now)
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int{2, len(files[d]) + len(files[ee])}, [2]int{res.Retained, res.Objects})
	requireGone(t, e.store, files[d])
	requireGone(t, e.store, files[ee])
	requirePresent(t, e.store, files[b])
	requirePresent(t, e.store, files[c])

	// Retention off keeps everything.
	keep := e.scheduler(scheduler.Config{}, o)
	clk.Set(now.Add(1000 * time.Hour))
	finish(c)
	res, err = keep.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int{0, 0}, [2]int{res.Retained, res.Objects})
	requirePresent(t, e.store, files[c])
	requirePresent(t, e.store, files[b])
}

// putArtifacts stores what a finished thread leaves in the blob store (and,
// for a root, its tree's workspace) and returns the keys.
func putArtifacts(t *testing.T, store blobstore.Store, id string, root bool) []string {
	t.Helper()
	keys := []string{
		blobkey.Segments(id) + "00000001.jsonl",
		blobkey.Segments(id) + "00000002.jsonl",
		blobkey.ThreadJSON(id),
		blobkey.Capabilities(id),
		blobkey.Knowledge("sched/tick", id),
		blobkey.Thread(id) + "artifacts/call_1.txt",
	}
	if root {
		keys = append(keys, blobkey.WorkspaceFile(id, "notes.txt"), blobkey.WorkspaceFile(id, "dir/more.txt"))
	}
	for _, k := range keys {
		require.NoError(t, store.Put(context.Background(), k, []byte("x")))
	}
	return keys
}

func requireGone(t *testing.T, store blobstore.Store, keys []string) {
	t.Helper()
	for _, k := range keys {
		_, err := store.Stat(context.Background(), k)
		require.ErrorIs(t, err, blobstore.ErrNotFound, k)
	}
}

func requirePresent(t *testing.T, store blobstore.Store, keys []string) {
	t.Helper()
	for _, k := range keys {
		_, err := store.Stat(context.Background(), k)
		require.NoError(t, err, k)
	}
}

// Housekeeping deletes the Redis Function libraries of spool's that no
// process has used for FunctionsUnused (the versions no longer deployed),
// at most once an hour per scheduler process.
func TestHousekeepPrunesUnusedFunctionLibraries(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if e.redis.Embedded {
		t.Skip("the embedded Redis has no Functions")
	}
	o := e.orch(nil)
	ctx := context.Background()
	script := func() *redisfn.Script { return redisfn.New("hk"+testenv.RandomID(6), "local x = 1", "return 1") }
	stale := func(s *redisfn.Script) {
		require.NoError(t, s.Run(ctx, redisfn.NewClient(o.Runtime().Services().Redis), nil).Err())
		require.NoError(t, o.Runtime().Services().Redis.HSet(ctx, keyspace.FunctionsSeen, s.Name(), time.Now().Add(-8*24*time.Hour).Unix()).Err())
	}
	gone := func(s *redisfn.Script) bool {
		libs, err := o.Runtime().Services().Redis.FunctionList(ctx, redis.FunctionListQuery{LibraryNamePattern: s.Name()}).Result()
		require.NoError(t, err)
		return len(libs) == 0
	}
	old, later := script(), script()
	t.Cleanup(func() {
		_ = o.Runtime().Services().Redis.HDel(context.Background(), keyspace.FunctionsSeen, old.Name(), later.Name()).Err()
	})
	stale(old)

	s := e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, FunctionsUnused: 7 * 24 * time.Hour}, o)
	res, err := s.Housekeep(ctx)
	require.NoError(t, err)
	require.True(t, gone(old), "unused for 8 days: deleted")
	require.Zero(t, o.Runtime().Services().Redis.HExists(ctx, keyspace.FunctionsSeen, old.Name()).Val(), "its record with it")
	for _, name := range res.Functions {
		require.True(t, strings.HasPrefix(name, redisfn.Prefix), "only spool's libraries: %s", name)
	}

	stale(later)
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Nil(t, res.Functions, "the next pass within the hour prunes nothing")
}
