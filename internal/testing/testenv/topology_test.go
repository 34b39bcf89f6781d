package testenv

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
)

func TestMain(m *testing.M) { MainLeakFree(m) }

// TestTopologiesAreWhatTheySay: the cluster spreads slots over three
// masters (two keys of different slots land on different nodes), and the
// sentinel's master has a replica in sync; both take writes through the
// URL a spool process would be given.
func TestTopologiesAreWhatTheySay(t *testing.T) {
	t.Parallel()
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		r := NewRedisOn(t, Cluster)
		if !strings.HasPrefix(r.URL, "redis-cluster://") {
			t.Fatalf("url %q", r.URL)
		}
		cc, ok := r.Universal.(*redis.ClusterClient)
		if !ok {
			t.Fatalf("client is %T, want a cluster client", r.Universal)
		}
		ctx := t.Context()
		var masters atomic.Int32 // ForEachMaster runs the callbacks concurrently
		if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			masters.Add(1)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if masters.Load() != 3 {
			t.Fatalf("%d masters, want 3", masters.Load())
		}
		nodes := map[string]bool{}
		for _, k := range []string{"{a}", "{b}", "{c}", "{d}", "{e}", "{f}"} {
			key := r.Namespace + k
			if err := cc.Set(ctx, key, "1", 0).Err(); err != nil {
				t.Fatal(err)
			}
			n, err := cc.MasterForKey(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			nodes[n.Options().Addr] = true
			cc.Del(ctx, key)
		}
		if len(nodes) < 2 {
			t.Fatalf("six hash tags all on one node %v: not a cluster", nodes)
		}
	})
	t.Run("sentinel", func(t *testing.T) {
		t.Parallel()
		r := NewRedisOn(t, Sentinel)
		if !strings.HasPrefix(r.URL, "redis-sentinel://") || r.Client == nil {
			t.Fatalf("url %q, client %T", r.URL, r.Universal)
		}
		info, err := r.Client.Info(t.Context(), "replication").Result()
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(info, "role:master") || !strings.Contains(info, "connected_slaves:1") {
			t.Fatalf("the failover client does not reach a master with one replica:\n%s", info)
		}
		key := r.Namespace + ":k"
		if err := r.Universal.Set(t.Context(), key, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
		r.Universal.Del(t.Context(), key)
	})
}
