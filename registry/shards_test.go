package registry

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/thread"
)

// setupSharded is setupRegistry on a three-node Redis Cluster with a
// sharded key space: a script whose keys left one slot would fail there
// with CROSSSLOT.
func setupSharded(t *testing.T) regFixture {
	t.Helper()
	r := testenv.NewRedisOn(t, testenv.Cluster)
	ks, err := Layout(context.Background(), r.Universal, keyspace.New(r.Namespace), 32, true)
	require.NoError(t, err)
	require.Equal(t, 32, ks.Shards())
	clock := testenv.NewTickingClock(time.Date(2026, 2, 17, 10, 0, 56, 0, time.UTC), time.Millisecond)
	reg, err := New(Config{Client: r.Universal, Keys: ks, Now: clock.Now, SafetyPoll: 200 * time.Millisecond})
	require.NoError(t, err)
	return regFixture{ctx: context.Background(), reg: reg, acts: NewActivations(r.Universal, ks, clock.Now), r: r, ks: ks, clock: clock}
}

// TestShardedOnCluster: on a Cluster with a sharded key space, a tree's
// scripts run (register under a parent, claim, suspend, commit, notify), a
// parent waits on a child of its tree and a thread of another tree's
// shard at once and is woken exactly once when the last finishes; a wait
// on a chain that finished before the suspension does not suspend; the
// readers merge the shards (List newest first, ListActive, Subscribe).
func TestShardedOnCluster(t *testing.T) {
	t.Parallel()
	f := setupSharded(t)
	now := time.Unix(1795325137, 0)
	p := thread.NewID("d/p", now)
	kid := thread.NewIDIn("d/kid", now, p)
	other := thread.NewID("d/other", now)
	for f.ks.ShardOf(other) == f.ks.ShardOf(p) {
		other = thread.NewID("d/other", now)
	}
	sub, err := f.reg.Subscribe(f.ctx)
	require.NoError(t, err)
	defer sub.Close()

	register(t, f, p, "")
	register(t, f, kid, p)
	register(t, f, other, "")
	c, err := f.acts.Claim(f.ctx, p, "start", 0, "tok", p, time.Minute)
	require.NoError(t, err)
	suspended, seq, err := f.acts.Suspend(f.ctx, p, c.Version, []WaitTarget{{Root: kid, Terminal: kid}, {Root: other, Terminal: other}})
	require.NoError(t, err)
	require.True(t, suspended)

	finish(t, f, f.acts, other, thread.StatusCompleted)
	w, err := f.acts.NotifyFinished(f.ctx, other)
	require.NoError(t, err)
	require.Empty(t, w, "the child still runs")
	finish(t, f, f.acts, kid, thread.StatusCompleted)
	w, err = f.acts.NotifyFinished(f.ctx, kid)
	require.NoError(t, err)
	require.Equal(t, []Wake{{ThreadID: p, Seq: seq}}, w)
	w, err = f.acts.NotifyFinished(f.ctx, other)
	require.NoError(t, err)
	require.Empty(t, w, "told again, nobody wakes twice")

	// A chain of another tree that finished already: no suspension.
	q := thread.NewID("d/q", now)
	register(t, f, q, "")
	cq, err := f.acts.Claim(f.ctx, q, "start", 0, "tok", q, time.Minute)
	require.NoError(t, err)
	suspended, _, err = f.acts.Suspend(f.ctx, q, cq.Version, []WaitTarget{{Root: other, Terminal: other}})
	require.NoError(t, err)
	require.False(t, suspended)

	// Status events of every shard reach one subscription.
	seen := map[string]bool{}
	for len(seen) < 3 {
		select {
		case e := <-sub.C:
			seen[e.ThreadID] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("events of %v only", seen)
		}
	}

	// The readers merge the shards.
	var roots []string
	for i := range 40 {
		id := thread.NewID(fmt.Sprintf("d/r%d", i), now)
		register(t, f, id, "")
		roots = append(roots, id)
	}
	all, err := f.reg.List(f.ctx, Filter{})
	require.NoError(t, err)
	require.Len(t, all, 44)
	for i := 1; i < len(all); i++ {
		require.False(t, all[i].CreatedAt.After(all[i-1].CreatedAt), "newest first")
	}
	require.Equal(t, roots[39], all[0].ThreadID)
	page, err := f.reg.ThreadsByTime(f.ctx, Window{Offset: 2, Count: 3})
	require.NoError(t, err)
	require.Equal(t, []string{other, q, roots[0]}, IDs(page), "oldest first, from the third")
	active, err := f.reg.ListActive(f.ctx)
	require.NoError(t, err)
	require.Len(t, active, 42, "p (waiting), q (running) and the 40 roots")
	shards := map[int]bool{}
	for _, id := range roots {
		shards[f.ks.ShardOf(id)] = true
	}
	require.Greater(t, len(shards), 10, "roots spread over the shards")
}

// TestLayout: a namespace's shard count is recorded on first use and
// every later process follows it; asking for another is refused, as is
// sharding a namespace that holds threads from before.
func TestLayout(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ctx := context.Background()
	ks, err := Layout(ctx, r.Client, keyspace.New(r.Namespace), 8, false)
	require.NoError(t, err)
	require.Equal(t, 8, ks.Shards())
	ks, err = Layout(ctx, r.Client, keyspace.New(r.Namespace), 1, false)
	require.NoError(t, err)
	require.Equal(t, 8, ks.Shards(), "recorded, not asked")
	_, err = Layout(ctx, r.Client, keyspace.New(r.Namespace), 4, true)
	require.ErrorContains(t, err, "has 8 shard(s), not 4")

	old := keyspace.New(r.Namespace + "-old")
	require.NoError(t, r.Client.ZAdd(ctx, old.Threads("x"), redisZ("x")).Err())
	_, err = Layout(ctx, r.Client, old, 32, true)
	require.ErrorContains(t, err, "cannot be sharded in place")
	ks, err = Layout(ctx, r.Client, old, 32, false)
	require.NoError(t, err)
	require.Equal(t, 1, ks.Shards(), "a default keeps the data where it is")

	require.NoError(t, r.Client.Set(ctx, keyspace.New(r.Namespace+"-bad").Layout(), "3", 0).Err())
	_, err = Layout(ctx, r.Client, keyspace.New(r.Namespace+"-bad"), 0, false)
	require.ErrorContains(t, err, "not a power of two")
}

func redisZ(id string) redis.Z { return redis.Z{Score: 1, Member: id} }
