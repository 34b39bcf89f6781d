package admission

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/internal/redisfn"
)

// Replicated grants (12.3, grants.durability: replica). A granting script
// is sent with WAIT 1 1000 on the same connection, in one pipeline, when
// the tenant's master has replicas, and its grants are enqueued once a
// replica acknowledged: Sentinel and Cluster promote the most up-to-date
// replica, so a grant that was enqueued survives a failover. A WAIT that
// times out is sent again twice on that connection; then the grant is
// used and counted (state unreplicated).
const (
	waitTimeout  = time.Second
	waitRetries  = 2
	replicasTTL  = 10 * time.Second
	waitReplicas = 1
)

// replication knows, per master, how many replicas it had when last
// asked (INFO replication, kept replicasTTL).
type replication struct {
	mu    sync.Mutex
	nodes map[*redis.Client]replicaCount
}

type replicaCount struct {
	n  int
	at time.Time
}

func newReplication() *replication { return &replication{nodes: map[*redis.Client]replicaCount{}} }

// run runs s on tenant's master, with the replication wait when the
// master has replicas; else as any script.
func (r *replication) run(ctx context.Context, a *Admitter, s *redisfn.Script, tenant string, keys []string, args []any) ([]any, error) {
	node := masterFor(ctx, a.rdb, keys[0])
	if node == nil || r.replicas(ctx, node) == 0 {
		return s.Run(ctx, a.rdb, keys, args...).Slice()
	}
	conn := node.Conn()
	defer func() { _ = conn.Close() }()
	res, acked, err := runWaiting(ctx, a.rdb, conn, s, keys, args)
	if err != nil {
		return nil, err
	}
	for i := 0; i < waitRetries && acked < waitReplicas; i++ {
		if acked, err = conn.Do(ctx, "WAIT", waitReplicas, waitTimeout.Milliseconds()).Int(); err != nil {
			break
		}
	}
	if acked < waitReplicas && grants(res) {
		// Used all the same, and counted: the rollback fence bounds what
		// a failover that loses it can cost.
		_ = a.rdb.HIncrBy(context.WithoutCancel(ctx), keys[2], "unreplicated", 1).Err()
	}
	return res, nil
}

// grants reports whether a tenant script's reply carries grants (it ends
// in activation, record pairs after its head); a reply that granted
// nothing needs no replica.
func grants(res []any) bool {
	for _, v := range res {
		if s, ok := v.(string); ok && strings.HasPrefix(s, "{") {
			return true
		}
	}
	return false
}

// runWaiting sends s and WAIT in one pipeline on conn; a function the
// server lacks is loaded and the pipeline sent again.
func runWaiting(ctx context.Context, c *redisfn.Client, conn *redis.Conn, s *redisfn.Script, keys []string, args []any) ([]any, int, error) {
	for attempt := 0; ; attempt++ {
		var cmd *redis.Cmd
		var wait *redis.Cmd
		_, err := conn.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = s.RunOn(ctx, c, p, keys, args...)
			wait = p.Do(ctx, "WAIT", waitReplicas, waitTimeout.Milliseconds())
			return nil
		})
		if err != nil && redisfn.Missing(cmd.Err()) && attempt == 0 {
			if lerr := s.Load(ctx, c); lerr != nil {
				return nil, 0, lerr
			}
			continue
		}
		if cmd.Err() != nil {
			return nil, 0, cmd.Err()
		}
		res, err := cmd.Slice()
		if err != nil {
			return nil, 0, err
		}
		n, _ := wait.Int()
		return res, n, nil
	}
}

// replicas is how many replicas node had when last asked.
func (r *replication) replicas(ctx context.Context, node *redis.Client) int {
	r.mu.Lock()
	rc, ok := r.nodes[node]
	r.mu.Unlock()
	if ok && time.Since(rc.at) < replicasTTL {
		return rc.n
	}
	n := 0
	if info, err := node.Info(ctx, "replication").Result(); err == nil {
		n = connectedReplicas(info)
	}
	r.mu.Lock()
	r.nodes[node] = replicaCount{n: n, at: time.Now()}
	r.mu.Unlock()
	return n
}

// connectedReplicas reads connected_slaves from INFO replication.
func connectedReplicas(info string) int {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// masterFor is the client of the master that holds key: the client
// itself (standalone, Sentinel), a Cluster's master of its slot; nil
// when there is none to ask.
func masterFor(ctx context.Context, c *redisfn.Client, key string) *redis.Client {
	switch b := autopipe.Unwrap(c.UniversalClient).(type) {
	case *redis.Client:
		return b
	case *redis.ClusterClient:
		m, err := b.MasterForKey(ctx, key)
		if err != nil {
			return nil
		}
		return m
	}
	return nil
}
