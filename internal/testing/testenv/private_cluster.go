package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/stack"
)

// PrivateCluster is a Redis Cluster of one test's own: masters, each
// with replicas, on loopback, which the test may break (Kill a master:
// its replica is promoted once the others agree it failed, after
// NodeTimeout). Its Redis is reached through a redis-cluster:// URL
// naming the masters.
type PrivateCluster struct {
	*Redis
	// Nodes are the servers, masters first, then their replicas in
	// master order.
	Nodes []*ClusterNode
	// NodeTimeout is the servers' cluster-node-timeout.
	NodeTimeout time.Duration
	dir         string
}

// ClusterNode is one server of a PrivateCluster.
type ClusterNode struct {
	Addr string // 127.0.0.1:port
	// ID is the node's cluster id.
	ID string
	// Master is the Addr of the master it replicates ("" for a master).
	Master string
	name   string
	nodeProcess
}

// NewPrivateCluster starts a Redis Cluster for t alone: masters masters
// owning the 16384 slots evenly, replicas replicas of each, every node a
// redis-server from PATH with cluster-node-timeout nodeTimeout. It waits
// until the cluster is ok and every replica is in sync. Without
// redis-server it skips, or fails when RequireReal.
func NewPrivateCluster(t testing.TB, masters, replicas int, nodeTimeout time.Duration) *PrivateCluster {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no redis-server on PATH for a private Redis Cluster")
		}
		t.Skip("no redis-server on PATH: the test needs a Redis Cluster of its own")
	}
	n := masters * (1 + replicas)
	ports, err := freePorts(2 * n)
	if err != nil {
		t.Fatal(err)
	}
	pc := &PrivateCluster{NodeTimeout: nodeTimeout, dir: t.TempDir()}
	t.Cleanup(func() {
		for _, nd := range pc.Nodes {
			nd.Kill()
		}
	})
	for i := 0; i < n; i++ {
		nd := &ClusterNode{Addr: fmt.Sprintf("127.0.0.1:%d", ports[i]), name: fmt.Sprintf("node-%d", i)}
		if i >= masters {
			nd.Master = pc.Nodes[(i-masters)%masters].Addr
		}
		pc.Nodes = append(pc.Nodes, nd)
		if err := pc.start(bin, nd, ports[i], ports[n+i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := pc.create(masters, ports[n:]); err != nil {
		t.Fatal(err)
	}
	var seeds []string
	for _, nd := range pc.Nodes[:masters] {
		seeds = append(seeds, nd.Addr)
	}
	url := "redis-cluster://" + strings.Join(seeds, ",")
	c, err := stack.OpenRedis(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	pc.Redis = &Redis{URL: url, Addr: seeds[0], Universal: c, Namespace: "t" + RandomID(6), Topology: Cluster}
	return pc
}

func (pc *PrivateCluster) start(bin string, nd *ClusterNode, port, bus int) error {
	dir := filepath.Join(pc.dir, nd.name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	logf, err := os.Create(filepath.Join(pc.dir, nd.name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(bus),
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-node-timeout", strconv.FormatInt(pc.NodeTimeout.Milliseconds(), 10),
		"--save", "", "--appendonly", "no", "--dir", dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", nd.name, err)
	}
	nd.cmd, nd.logf = cmd, logf
	if err := stack.WaitRedis("redis://"+nd.Addr+"/0", 10*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, logTail(pc.dir, nd.name))
	}
	return nil
}

// create assigns the slots to the masters, makes every node meet the
// first, each replica replicate its master, and waits until the cluster
// is ok with every replica in sync.
func (pc *PrivateCluster) create(masters int, busPorts []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	clients := make([]*redis.Client, len(pc.Nodes))
	for i, nd := range pc.Nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: nd.Addr})
		defer clients[i].Close()
		id, err := clients[i].Do(ctx, "cluster", "myid").Text()
		if err != nil {
			return fmt.Errorf("cluster myid on %s: %w", nd.Addr, err)
		}
		nd.ID = id
	}
	const slots = 16384
	per := slots / masters
	for i := 0; i < masters; i++ {
		lo, hi := i*per, (i+1)*per-1
		if i == masters-1 {
			hi = slots - 1
		}
		if err := clients[i].Do(ctx, "cluster", "addslotsrange", lo, hi).Err(); err != nil {
			return fmt.Errorf("cluster addslotsrange on %s: %w", pc.Nodes[i].Addr, err)
		}
		if err := clients[i].Do(ctx, "cluster", "set-config-epoch", i+1).Err(); err != nil {
			return fmt.Errorf("cluster set-config-epoch on %s: %w", pc.Nodes[i].Addr, err)
		}
	}
	for i, nd := range pc.Nodes[1:] {
		host, port, _ := strings.Cut(nd.Addr, ":")
		if err := clients[0].Do(ctx, "cluster", "meet", host, port, busPorts[i+1]).Err(); err != nil {
			return fmt.Errorf("cluster meet %s: %w", nd.Addr, err)
		}
	}
	// A replica can replicate its master once it knows it.
	for i, nd := range pc.Nodes {
		if nd.Master == "" {
			continue
		}
		masterID := pc.Nodes[(i-masters)%masters].ID
		if err := poll(ctx, func() error {
			return clients[i].Do(ctx, "cluster", "replicate", masterID).Err()
		}); err != nil {
			return fmt.Errorf("cluster replicate on %s: %w", nd.Addr, err)
		}
	}
	for i, c := range clients {
		i, c := i, c
		if err := poll(ctx, func() error {
			info, err := c.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(pc.Nodes))) {
				return fmt.Errorf("not ok yet:\n%s", info)
			}
			if pc.Nodes[i].Master == "" {
				return nil
			}
			repl, err := c.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if !strings.Contains(repl, "master_link_status:up") {
				return fmt.Errorf("replica not in sync yet:\n%s", repl)
			}
			return nil
		}); err != nil {
			return fmt.Errorf("cluster node %s: %w", pc.Nodes[i].Addr, err)
		}
	}
	return nil
}

// poll runs f every 100ms until it succeeds or ctx ends (then its last
// error).
func poll(ctx context.Context, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// alive reports whether the node was not killed.
func (nd *ClusterNode) alive() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.cmd != nil
}

// Promoted waits until every live node names another master than the
// killed master old for old's first slot, and returns that master's
// address.
func (pc *PrivateCluster) Promoted(ctx context.Context, old *ClusterNode) (string, error) {
	slot := int64(-1)
	for i, n := range pc.Nodes[:pc.masters()] {
		if n == old {
			slot = int64(i * (16384 / pc.masters()))
		}
	}
	if slot < 0 {
		return "", fmt.Errorf("%s is not one of the cluster's first masters", old.Addr)
	}
	var addr string
	err := poll(ctx, func() error {
		addr = ""
		for _, nd := range pc.Nodes {
			if nd == old || !nd.alive() {
				continue
			}
			c := redis.NewClient(&redis.Options{Addr: nd.Addr})
			shards, err := c.ClusterShards(ctx).Result()
			c.Close()
			if err != nil {
				return err
			}
			owner := ""
			for _, sh := range shards {
				for _, r := range sh.Slots {
					if r.Start > slot || slot > r.End {
						continue
					}
					for _, n := range sh.Nodes {
						if n.Role == "master" && n.Health == "online" {
							owner = fmt.Sprintf("%s:%d", n.IP, n.Port)
						}
					}
				}
			}
			if owner == "" || owner == old.Addr {
				return fmt.Errorf("%s still names %s for slot %d", nd.Addr, old.Addr, slot)
			}
			if addr != "" && addr != owner {
				return fmt.Errorf("nodes disagree on slot %d: %s and %s", slot, addr, owner)
			}
			addr = owner
		}
		return nil
	})
	return addr, err
}

// masters counts the cluster's first masters.
func (pc *PrivateCluster) masters() int {
	n := 0
	for _, nd := range pc.Nodes {
		if nd.Master == "" {
			n++
		}
	}
	return n
}

// MasterOfSlot is the master that owned slot when the cluster was made.
func (pc *PrivateCluster) MasterOfSlot(slot int64) *ClusterNode {
	masters := pc.masters()
	per := int64(16384 / masters)
	i := min(int(slot/per), masters-1)
	return pc.Nodes[i]
}
