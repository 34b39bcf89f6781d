package registry

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/keyspace"
)

// Sharded key spaces (keyspace.NewSharded) keep the thread list, the
// active set and the approvals set one per shard; the readers here merge
// them. With one shard each is one command, as before.

// members is the union of the sets keys (one pipeline).
func members(ctx context.Context, rdb redis.Cmdable, keys []string) ([]string, error) {
	if len(keys) == 1 {
		return rdb.SMembers(ctx, keys[0]).Result()
	}
	pipe := rdb.Pipeline()
	cmds := make([]*redis.StringSliceCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.SMembers(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	var out []string
	for _, c := range cmds {
		out = append(out, c.Val()...)
	}
	return out, nil
}

// Window selects thread ids by creation time (ThreadsByTime): scores
// (unix ms) from Min to Max ("-inf", "+inf" or a number), newest first
// when Newest, the Count (all when 0) from Offset of that order.
type Window struct {
	Min, Max      string
	Newest        bool
	Offset, Count int64
}

// ThreadsByTime reads the thread list (every shard's, merged) in creation
// order: the ids of w, with their scores. A merged window reads
// Offset+Count entries of each shard: the thread list pages with it, so
// Offset stays small.
func (r *Registry) ThreadsByTime(ctx context.Context, w Window) ([]redis.Z, error) {
	return r.byTime(ctx, r.ks.AllThreads(), w)
}

// TenantThreadsByTime reads tenant's runs (every shard's index of them,
// merged) as ThreadsByTime reads every run.
func (r *Registry) TenantThreadsByTime(ctx context.Context, tenant string, w Window) ([]redis.Z, error) {
	return r.byTime(ctx, r.ks.AllTenantThreads(tenant), w)
}

// byTime reads w from the sorted sets keys, one per shard, merged.
func (r *Registry) byTime(ctx context.Context, keys []string, w Window) ([]redis.Z, error) {
	if w.Min == "" {
		w.Min = "-inf"
	}
	if w.Max == "" {
		w.Max = "+inf"
	}
	if len(keys) == 1 {
		if w.Count == 0 && w.Offset > 0 {
			return nil, fmt.Errorf("threads by time: an offset needs a count")
		}
		return w.read(ctx, r.rdb, keys[0], w.Offset, w.Count).Result()
	}
	return w.merged(ctx, r.rdb, keys)
}

// read reads (or queues, on a pipeline) the n entries from off (all when
// n is 0) of w's scores on one shard's thread list, in w's order.
func (w Window) read(ctx context.Context, c redis.Cmdable, key string, off, n int64) *redis.ZSliceCmd {
	by := &redis.ZRangeBy{Min: w.Min, Max: w.Max, Offset: off, Count: n}
	if n == 0 {
		by.Offset, by.Count = 0, 0
	}
	if w.Newest {
		return c.ZRevRangeByScoreWithScores(ctx, key, by)
	}
	return c.ZRangeByScoreWithScores(ctx, key, by)
}

// merged reads w from the thread lists keys, every shard's, in one
// pipeline: the first Offset+Count entries of each, merged in w's order,
// of which it keeps the Count from Offset.
func (w Window) merged(ctx context.Context, rdb redis.Cmdable, keys []string) ([]redis.Z, error) {
	pipe := rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(keys))
	n := w.Offset + w.Count
	if w.Count == 0 {
		n = 0
	}
	for i, k := range keys {
		cmds[i] = w.read(ctx, pipe, k, 0, n)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("threads by time: %w", err)
	}
	var all []redis.Z
	for _, c := range cmds {
		all = append(all, c.Val()...)
	}
	slices.SortFunc(all, w.compare)
	lo := min(w.Offset, int64(len(all)))
	hi := int64(len(all))
	if w.Count > 0 {
		hi = min(lo+w.Count, hi)
	}
	return all[lo:hi], nil
}

// compare orders two thread list entries as w reads them: by score (the
// creation time), then by id, newest first when Newest.
func (w Window) compare(a, b redis.Z) int {
	c := cmp.Compare(a.Score, b.Score)
	if c == 0 {
		am, _ := a.Member.(string)
		bm, _ := b.Member.(string)
		c = cmp.Compare(am, bm)
	}
	if w.Newest {
		return -c
	}
	return c
}

// IDs are the members of zs.
func IDs(zs []redis.Z) []string {
	ids := make([]string, len(zs))
	for i, z := range zs {
		ids[i], _ = z.Member.(string)
	}
	return ids
}

// DefaultClusterShards is the shard count of a namespace first used on a
// Redis Cluster when the operator does not say: an even spread of trees
// over the nodes (keyspace.NewSharded) at a small cost to the readers
// that merge every shard (thread list, active set).
const DefaultClusterShards = 32

// DefaultShards is the shard count of a new namespace on rdb:
// DefaultClusterShards on a Redis Cluster, else 1 (one node holds
// everything anyway).
func DefaultShards(rdb redis.UniversalClient) int {
	if _, ok := rdb.(*redis.ClusterClient); ok {
		return DefaultClusterShards
	}
	return 1
}

// Layout fixes the shard count of namespace ks on first use and returns the
// key space every process of the deployment must use: the count recorded
// in Redis when there is one, else want (at least 1), recorded now; a
// namespace that already holds threads from before layouts were recorded
// keeps one shard. With strict (the operator asked for want), a recorded
// count that differs is an error: a namespace's keys cannot move.
func Layout(ctx context.Context, rdb redis.Cmdable, ks keyspace.Space, want int, strict bool) (keyspace.Space, error) {
	ns := ks.Namespace()
	got, err := rdb.Get(ctx, ks.Layout()).Result()
	switch {
	case errors.Is(err, redis.Nil):
		if got, err = recordLayout(ctx, rdb, ks, want, strict); err != nil {
			return ks, err
		}
		if err := markIndexedIfEmpty(ctx, rdb, ks, got); err != nil {
			return ks, err
		}
	case err != nil:
		return ks, fmt.Errorf("redis layout: %w", err)
	}
	n, err := strconv.Atoi(got)
	if err != nil || n < 1 || n > keyspace.MaxShards || n&(n-1) != 0 {
		return ks, fmt.Errorf("redis layout: namespace %q records %q shards, not a power of two up to %d", ns, got, keyspace.MaxShards)
	}
	if strict && max(want, 1) != n {
		return ks, fmt.Errorf("redis layout: namespace %q has %d shard(s), not %d (a namespace's keys cannot move: use a new namespace)", ns, n, want)
	}
	return keyspace.NewSharded(ns, n), nil
}

// recordLayout records the shard count of namespace ks, which has none
// yet, and returns the count recorded (another process may have recorded
// its own first): want, at least 1, but 1 for a namespace that already
// holds threads in one slot, which with strict is an error.
func recordLayout(ctx context.Context, rdb redis.Cmdable, ks keyspace.Space, want int, strict bool) (string, error) {
	n := max(want, 1)
	if n > 1 {
		old, err := rdb.Exists(ctx, keyspace.New(ks.Namespace()).Threads("")).Result()
		if err != nil {
			return "", fmt.Errorf("redis layout: %w", err)
		}
		if old > 0 && strict {
			return "", fmt.Errorf("redis layout: namespace %q holds threads in one slot; it cannot be sharded in place (use a new namespace)", ks.Namespace())
		}
		if old > 0 {
			n = 1
		}
	}
	if err := rdb.SetNX(ctx, ks.Layout(), n, 0).Err(); err != nil {
		return "", fmt.Errorf("redis layout: %w", err)
	}
	got, err := rdb.Get(ctx, ks.Layout()).Result()
	if err != nil {
		return "", fmt.Errorf("redis layout: %w", err)
	}
	return got, nil
}

// markIndexedIfEmpty sets DirectiveIndexed on a namespace first used now
// that holds no run in any layout: every run it will hold is indexed at
// its registration, and nothing needs a backfill.
func markIndexedIfEmpty(ctx context.Context, rdb redis.Cmdable, ks keyspace.Space, shards string) error {
	keys := keyspace.New(ks.Namespace()).AllThreads()
	if n, err := strconv.Atoi(shards); err == nil && n > 1 {
		keys = append(keys, keyspace.NewSharded(ks.Namespace(), n).AllThreads()...)
	}
	held := int64(0)
	for _, k := range keys {
		n, err := rdb.Exists(ctx, k).Result()
		if err != nil {
			return fmt.Errorf("redis layout: %w", err)
		}
		held += n
	}
	if held > 0 {
		return nil
	}
	if err := rdb.SetNX(ctx, ks.DirectiveIndexed(), "1", 0).Err(); err != nil {
		return fmt.Errorf("redis layout: %w", err)
	}
	return nil
}
