package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestShardedTreeOnCluster: on a Redis Cluster a namespace is sharded by
// default; a four-level spawn chain run by CLI workers keeps its whole
// tree in one slot (its scripts walk it) while other trees land
// elsewhere, and `thread list` merges every shard.
func TestShardedTreeOnCluster(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: coordProject(), Topology: testenv.Cluster})
	require.Equal(t, registry.DefaultClusterShards, e.Keys.Shards(), "a Cluster namespace is sharded")
	e.StartWorker("--concurrency", "4")
	slots := map[uint16]bool{}
	for range 3 {
		rec := runCompleted(t, e, "t/chain", "--input", "level=1", "--model", "script:scripts/c.yaml")
		all := tree(t, e, rec.ThreadID)
		require.Len(t, all, 4, "levels 1 to 4")
		want := keyspace.Slot(e.Keys.Thread(rec.ThreadID))
		slots[want] = true
		for _, r := range all {
			require.Equal(t, thread.StatusCompleted, r.Status, r.ThreadID)
			require.Equal(t, want, keyspace.Slot(e.Keys.Thread(r.ThreadID)), "%s in its root's slot", r.ThreadID)
			require.Equal(t, want, keyspace.Slot(e.Keys.Ledger(r.ThreadID)))
		}
	}
	listed := spoolJSON[struct{ Threads []map[string]any }](t, e, "thread", "list", "--json").Threads
	require.Len(t, listed, 12, "every thread of every shard")
	t.Logf("3 trees in %d slots", len(slots))
}

// TestRedisShardsIsFixed: a namespace's shard count is fixed at first use;
// a process asking for another count is refused with one line (exit 2)
// and nothing changes.
func TestRedisShardsIsFixed(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: coordProject()})
	have := e.Keys.Shards() // 1, or 32 on a Cluster (SPOOL_TEST_TOPOLOGY)
	other := have * 2
	res := e.SpoolContext(context.Background(), []string{fmt.Sprintf("SPOOL_REDIS_SHARDS=%d", other)}, "thread", "list")
	require.Equal(t, 2, res.Code, res.Stderr)
	require.Contains(t, res.Stderr, fmt.Sprintf("has %d shard(s), not %d", have, other))
	require.Equal(t, 1, strings.Count(strings.TrimSpace(res.Stderr), "\n")+1, res.Stderr)
	res = e.SpoolContext(context.Background(), []string{fmt.Sprintf("SPOOL_REDIS_SHARDS=%d", have)}, "thread", "list")
	require.Equal(t, 0, res.Code, res.Stderr)
}
