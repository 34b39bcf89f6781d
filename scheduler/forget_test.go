package scheduler_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/thread"
)

// TestRecordRetention: with RecordRetention, housekeeping deletes every
// Redis key of a finished tree (a root, its child, the root's
// continuation and the child's) once Retention deleted its artifacts
// RecordRetention less Retention ago, the tree at once; a tree with a
// thread that runs, or whose artifacts went since, keeps every record.
func TestRecordRetention(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tr := newTrees(t, e)
	clk, o, now, start, finish := tr.clk, tr.o, tr.now, tr.start, tr.finish
	ctx := context.Background()
	continueAs := func(id, kind string) string {
		t.Helper()
		rec, err := o.Record(ctx, id)
		require.NoError(t, err)
		next := start(orchestrator.StartRequest{ParentID: rec.ParentID, PreviousThreadID: id, Kind: kind})
		_, _, err = o.Runtime().Services().Registry.LinkContinuation(ctx, id, next)
		require.NoError(t, err)
		return next
	}
	housekeep := func(at time.Time, retained, forgotten int) {
		t.Helper()
		clk.Set(at)
		res, err := e.scheduler(scheduler.Config{Retention: 5 * time.Hour, RecordRetention: 48 * time.Hour}, o).Housekeep(ctx)
		require.NoError(t, err)
		require.Equal(t, [2]int{retained, forgotten}, [2]int{res.Retained, res.Forgotten}, "threads retained, forgotten")
	}
	requireRecords := func(ids ...string) {
		t.Helper()
		for _, id := range ids {
			_, err := o.Record(ctx, id)
			require.NoError(t, err, id)
		}
	}
	// 100h ago. Tree 1: root A hands off to A2; A's child K to K2.
	// Tree 1 has a tenant and tags: its runs are in their indexes too.
	a := start(orchestrator.StartRequest{Tenant: "acme", Tags: map[string]string{"batch": "7"}})
	k := start(orchestrator.StartRequest{ParentID: a})
	finish(continueAs(k, orchestrator.KindHandoff))
	a2 := continueAs(a, orchestrator.KindHandoff)
	finish(a2)
	tree1, err := o.Threads(ctx, registry.Filter{})
	require.NoError(t, err)
	require.Len(t, tree1, 4)
	// Tree 2: root B, finished, with a child C that runs. Tree 3: root R,
	// finished, resumed 80h ago as R2, which runs until 10h ago.
	b := start(orchestrator.StartRequest{})
	c := start(orchestrator.StartRequest{ParentID: b})
	finish(b)
	r := start(orchestrator.StartRequest{})
	finish(r)
	clk.Set(now.Add(-80 * time.Hour))
	r2 := continueAs(r, orchestrator.KindResume)

	housekeep(now.Add(-60*time.Hour), 4, 0) // tree 1's artifacts
	clk.Set(now.Add(-10 * time.Hour))
	finish(r2)
	housekeep(now, 2, 4) // tree 3's artifacts; tree 1's records
	var ids []string
	for _, rec := range tree1 {
		ids = append(ids, rec.ThreadID)
		_, err := o.Record(ctx, rec.ThreadID)
		require.ErrorIs(t, err, registry.ErrNotFound, rec.ThreadID)
	}
	require.Empty(t, e.keysNaming(t, ids...), "every Redis key of tree 1 went")
	requireRecords(b, c, r, r2)
	listed, err := o.Threads(ctx, registry.Filter{})
	require.NoError(t, err)
	require.Len(t, listed, 4)

	finish(c)
	housekeep(now.Add(50*time.Hour), 2, 2) // tree 2's artifacts; tree 3's records
	requireRecords(b, c)
	housekeep(now.Add(100*time.Hour), 0, 2) // tree 2's records
	require.Empty(t, e.keysNaming(t, b, c, r, r2))
	housekeep(now.Add(200*time.Hour), 0, 0)
}

// TestRecordRetentionPassesATreeTooLarge: a tree with more threads than
// RecordRetentionTree keeps its records, and the sweeps go on past it to
// the trees after it (a pass examines two threads here).
func TestRecordRetentionPassesATreeTooLarge(t *testing.T) {
	t.Parallel()
	e := setup(t)
	tr := newTrees(t, e)
	clk, o, now, start, finish := tr.clk, tr.o, tr.now, tr.start, tr.finish
	ctx := context.Background()
	big := start(orchestrator.StartRequest{})
	kid := orchestrator.StartRequest{ParentID: big}
	kids := []string{start(kid), start(kid), start(kid)}
	small := start(orchestrator.StartRequest{})
	for _, id := range append(kids, big, small) {
		finish(id)
	}
	s := e.scheduler(scheduler.Config{Retention: time.Hour, RecordRetention: time.Hour, RecordRetentionTree: 3, RetentionScan: 2}, o)
	for _, at := range []time.Duration{-50 * time.Hour, 0} {
		clk.Set(now.Add(at))
		for range 4 {
			_, err := s.Housekeep(ctx)
			require.NoError(t, err)
		}
	}
	_, err := o.Record(ctx, small)
	require.ErrorIs(t, err, registry.ErrNotFound, "the tree after the large one went")
	for _, id := range append(kids, big) {
		_, err := o.Record(ctx, id)
		require.NoError(t, err, "a tree of 4 threads, over the bound of 3, stays whole")
	}
}

// trees starts threads for the retention tests: an orchestrator on a
// clock set 100 h before now.
type trees struct {
	t      *testing.T
	e      *env
	clk    *testenv.Clock
	o      *orchestrator.Orchestrator
	now    time.Time
	bundle string
}

func newTrees(t *testing.T, e *env) *trees {
	now := time.Now()
	clk := testenv.NewClock(now.Add(-100 * time.Hour))
	return &trees{t: t, e: e, clk: clk, o: e.orch(clk.Now), now: now, bundle: e.bundle()}
}

// start starts a thread a second after the one before, and claims it
// for a worker that died.
func (tr *trees) start(req orchestrator.StartRequest) string {
	tr.t.Helper()
	tr.clk.Add(time.Second)
	req.Directive, req.Inputs, req.Queue, req.Bundle = "sched/tick", map[string]any{"who": "x"}, tr.e.queue, tr.bundle
	rec, err := tr.o.Start(context.Background(), req)
	require.NoError(tr.t, err)
	claimDead(tr.t, tr.o, rec.ThreadID)
	return rec.ThreadID
}

// finish completes thread id.
func (tr *trees) finish(id string) {
	tr.t.Helper()
	_, err := tr.o.Runtime().Services().Registry.Transition(context.Background(), id, thread.StatusCompleted, 0)
	require.NoError(tr.t, err)
}

// TestRecordRetentionNeedsRetention: records go only after the artifacts
// they name, so RecordRetention needs a Retention no longer than itself.
func TestRecordRetentionNeedsRetention(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := e.orch(time.Now)
	for _, cfg := range []scheduler.Config{{RecordRetention: time.Hour}, {Retention: 2 * time.Hour, RecordRetention: time.Hour},
		{Retention: time.Hour, RecordRetention: -time.Hour}} {
		cfg.Redis = o.Runtime().Services().Redis
		_, err := scheduler.New(cfg, o)
		require.ErrorContains(t, err, "RecordRetention", "%+v", cfg)
	}
}

// keysNaming returns spool's keys of the test's namespace whose name holds
// one of ids, and the members of its sets and sorted sets that are one
// (not asynq's: the test claims threads without running their tasks).
func (e *env) keysNaming(t *testing.T, ids ...string) []string {
	t.Helper()
	ctx := context.Background()
	var found []string
	iter := e.redis.Client.Scan(ctx, 0, "*"+e.redis.Namespace+"*", 1000).Iterator()
	for iter.Next(ctx) {
		k := iter.Val()
		if strings.HasPrefix(k, "asynq:") {
			continue
		}
		for _, id := range ids {
			if strings.Contains(k, id) {
				found = append(found, k)
			}
		}
		var members []string
		switch typ, _ := e.redis.Client.Type(ctx, k).Result(); typ {
		case "set":
			members, _ = e.redis.Client.SMembers(ctx, k).Result()
		case "zset":
			members, _ = e.redis.Client.ZRange(ctx, k, 0, -1).Result()
		}
		for _, m := range members {
			for _, id := range ids {
				if m == id {
					found = append(found, k+" ∋ "+id)
				}
			}
		}
	}
	require.NoError(t, iter.Err())
	return found
}
