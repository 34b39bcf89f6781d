package testenv

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/stack"
)

// Topology is a Redis deployment a test can run on.
type Topology string

const (
	// Standalone is one redis-server (or, outside CI, miniredis): NewRedis.
	Standalone Topology = "standalone"
	// Cluster is a Redis Cluster of three masters on loopback, no replicas,
	// reached through a redis-cluster:// URL.
	Cluster Topology = "cluster"
	// Sentinel is a master, a replica of it and one sentinel watching them,
	// reached through a redis-sentinel:// URL.
	Sentinel Topology = "sentinel"
)

// Topologies lists every topology, standalone first.
var Topologies = []Topology{Standalone, Cluster, Sentinel}

// DefaultTopology is the topology of tests that name none: Standalone,
// or SPOOL_TEST_TOPOLOGY (standalone, cluster, sentinel), so that a whole
// suite can be run on a Cluster or behind a Sentinel by hand.
func DefaultTopology() Topology {
	if v := os.Getenv("SPOOL_TEST_TOPOLOGY"); v != "" {
		return Topology(v)
	}
	return Standalone
}

// SentinelMaster is the master name of the sentinel this package starts.
const SentinelMaster = "spool-test"

type topoServer struct {
	once sync.Once
	url  string
	err  error
	skip string // why there is no server (binaries missing)
}

var topoServers = map[Topology]*topoServer{Cluster: {}, Sentinel: {}}

// NewRedisOn returns a Redis of the given topology with a fresh random
// namespace and a client closed at cleanup.
//
// Cluster: SPOOL_TEST_REDIS_CLUSTER_URL (redis-cluster://h:p,h:p,h:p) when
// set, else three `redis-server --cluster-enabled yes` on free loopback
// ports, joined into one cluster. Sentinel: SPOOL_TEST_REDIS_SENTINEL_URL
// (redis-sentinel://h:p/?master=NAME) when set, else a redis-server master,
// a redis-server replica and a redis-sentinel (all from PATH). Servers are
// started once per test binary and stopped by Main. Without the binaries
// the test skips, or fails when RequireReal.
func NewRedisOn(t testing.TB, top Topology) *Redis {
	t.Helper()
	if top == Standalone || top == "" {
		return NewRedis(t)
	}
	srv, ok := topoServers[top]
	if !ok {
		t.Fatalf("testenv: unknown Redis topology %q", top)
	}
	srv.once.Do(func() {
		switch top {
		case Cluster:
			srv.url, srv.skip, srv.err = startCluster()
		case Sentinel:
			srv.url, srv.skip, srv.err = startSentinel()
		}
	})
	if srv.err != nil {
		t.Fatalf("testenv: redis %s: %v", top, srv.err)
	}
	if srv.skip != "" {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no Redis %s: %s", top, srv.skip)
		}
		t.Skipf("no Redis %s: %s", top, srv.skip)
	}
	c, err := stack.OpenRedis(srv.url)
	if err != nil {
		t.Fatalf("testenv: open %s: %v", stack.RedactURL(srv.url), err)
	}
	t.Cleanup(func() { _ = c.Close() })
	r := &Redis{URL: srv.url, Universal: c, Namespace: "t" + RandomID(6), Topology: top}
	if cc, ok := c.(*redis.Client); ok { // Sentinel: a failover client
		r.Client = cc
	}
	if opt, err := redisHosts(srv.url); err == nil {
		r.Addr = opt[0]
	}
	return r
}

// redisHosts are the host:port pairs of a redis-cluster:// or
// redis-sentinel:// URL.
func redisHosts(raw string) ([]string, error) {
	_, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return nil, fmt.Errorf("no scheme")
	}
	if i := strings.IndexAny(rest, "/?"); i >= 0 {
		rest = rest[:i]
	}
	if i := strings.LastIndex(rest, "@"); i >= 0 {
		rest = rest[i+1:]
	}
	hosts := strings.Split(rest, ",")
	if len(hosts) == 0 || hosts[0] == "" {
		return nil, fmt.Errorf("no hosts")
	}
	return hosts, nil
}

// binaries looks the named programs up on PATH; missing names the first
// one that is not there.
func binaries(names ...string) (paths []string, missing string) {
	for _, n := range names {
		p, err := exec.LookPath(n)
		if err != nil {
			return nil, n + " is not on PATH"
		}
		paths = append(paths, p)
	}
	return paths, ""
}

// startProc starts a Redis program logging into dir/name.log and stops it
// (and removes nothing: the caller owns dir) at Main's end.
func startProc(dir, name, bin string, args ...string) error {
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	addStop(func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); logf.Close() })
	return nil
}

// logTail is the end of dir/name.log, for errors.
func logTail(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, name+".log"))
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// freePorts returns n distinct free loopback ports.
func freePorts(n int) ([]int, error) {
	seen := map[int]bool{}
	var out []int
	for len(out) < n {
		p, err := FreePort()
		if err != nil {
			return nil, err
		}
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, nil
}

// StartCluster starts a three-node Redis Cluster on free loopback ports,
// as the Cluster topology does, for a program that is no test (package
// bench). stop stops its servers.
func StartCluster() (url string, stop func(), err error) {
	url, skip, err := startCluster()
	if err == nil && skip != "" {
		err = errors.New(skip)
	}
	return url, stopAll, err
}

func startCluster() (url, skip string, err error) {
	if u := os.Getenv("SPOOL_TEST_REDIS_CLUSTER_URL"); u != "" {
		return u, "", waitCluster(u, 30*time.Second)
	}
	bins, missing := binaries("redis-server")
	if missing != "" {
		return "", missing + " (or set SPOOL_TEST_REDIS_CLUSTER_URL)", nil
	}
	const nodes = 3
	// Each node listens on a port and a cluster-bus port of its own
	// (cluster-port: the default port+10000 may be taken or past 65535).
	ports, err := freePorts(2 * nodes)
	if err != nil {
		return "", "", err
	}
	dir, err := os.MkdirTemp("", "spool-test-cluster-")
	if err != nil {
		return "", "", err
	}
	addStop(func() { _ = os.RemoveAll(dir) })
	var addrs []string
	for i := 0; i < nodes; i++ {
		nd := filepath.Join(dir, strconv.Itoa(i))
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return "", "", err
		}
		name := fmt.Sprintf("cluster-%d", i)
		if err := startProc(dir, name, bins[0], "--port", strconv.Itoa(ports[i]), "--bind", "127.0.0.1",
			"--cluster-enabled", "yes", "--cluster-port", strconv.Itoa(ports[nodes+i]),
			"--cluster-config-file", filepath.Join(nd, "nodes.conf"), "--cluster-node-timeout", "5000",
			"--save", "", "--appendonly", "no", "--dir", nd); err != nil {
			return "", "", err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", ports[i])
		if err := stack.WaitRedis("redis://"+addr+"/0", 10*time.Second); err != nil {
			return "", "", fmt.Errorf("%w\n%s", err, logTail(dir, name))
		}
		addrs = append(addrs, addr)
	}
	if err := createCluster(addrs, ports[nodes:]); err != nil {
		return "", "", err
	}
	url = "redis-cluster://" + strings.Join(addrs, ",")
	return url, "", waitCluster(url, 30*time.Second)
}

// createCluster does what `redis-cli --cluster create ... --cluster-replicas
// 0` does: the 16384 slots split evenly across the nodes, each node a
// config epoch of its own, then the nodes meet (on their bus ports).
func createCluster(addrs []string, busPorts []int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const slots = 16384
	per := slots / len(addrs)
	var first *redis.Client
	for i, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		lo, hi := i*per, (i+1)*per-1
		if i == len(addrs)-1 {
			hi = slots - 1
		}
		ss := make([]int, 0, hi-lo+1)
		for s := lo; s <= hi; s++ {
			ss = append(ss, s)
		}
		if err := c.ClusterAddSlots(ctx, ss...).Err(); err != nil {
			return fmt.Errorf("cluster addslots on %s: %w", addr, err)
		}
		if err := c.Do(ctx, "cluster", "set-config-epoch", i+1).Err(); err != nil {
			return fmt.Errorf("cluster set-config-epoch on %s: %w", addr, err)
		}
		if i == 0 {
			first = c
			continue
		}
		host, port, _ := strings.Cut(addr, ":")
		if err := first.Do(ctx, "cluster", "meet", host, port, busPorts[i]).Err(); err != nil {
			return fmt.Errorf("cluster meet %s: %w", addr, err)
		}
	}
	return nil
}

// waitCluster waits until every node of the cluster says it is ok, knows
// every node and sees every slot assigned.
func waitCluster(url string, d time.Duration) error {
	addrs, err := redisHosts(url)
	if err != nil {
		return fmt.Errorf("cluster url: %w", err)
	}
	deadline := time.Now().Add(d)
	for _, addr := range addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		for {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			info, err := c.ClusterInfo(ctx).Result()
			cancel()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_assigned:16384") &&
				strings.Contains(info, fmt.Sprintf("cluster_known_nodes:%d", len(addrs))) {
				break
			}
			if time.Now().After(deadline) {
				c.Close()
				if err != nil {
					return fmt.Errorf("cluster node %s not ready: %w", addr, err)
				}
				return fmt.Errorf("cluster node %s not ready:\n%s", addr, info)
			}
			time.Sleep(100 * time.Millisecond)
		}
		c.Close()
	}
	return nil
}

func startSentinel() (url, skip string, err error) {
	if u := os.Getenv("SPOOL_TEST_REDIS_SENTINEL_URL"); u != "" {
		return u, "", waitSentinel(u, 30*time.Second)
	}
	bins, missing := binaries("redis-server", "redis-sentinel")
	if missing != "" {
		return "", missing + " (or set SPOOL_TEST_REDIS_SENTINEL_URL)", nil
	}
	ports, err := freePorts(3)
	if err != nil {
		return "", "", err
	}
	master, replica, sentinel := ports[0], ports[1], ports[2]
	dir, err := os.MkdirTemp("", "spool-test-sentinel-")
	if err != nil {
		return "", "", err
	}
	addStop(func() { _ = os.RemoveAll(dir) })
	for _, s := range []struct {
		name string
		port int
		args []string
	}{
		{"master", master, nil},
		{"replica", replica, []string{"--replicaof", "127.0.0.1", strconv.Itoa(master)}},
	} {
		nd := filepath.Join(dir, s.name)
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return "", "", err
		}
		args := append([]string{"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", nd}, s.args...)
		if err := startProc(dir, s.name, bins[0], args...); err != nil {
			return "", "", err
		}
		if err := stack.WaitRedis(fmt.Sprintf("redis://127.0.0.1:%d/0", s.port), 10*time.Second); err != nil {
			return "", "", fmt.Errorf("%w\n%s", err, logTail(dir, s.name))
		}
	}
	// The sentinel rewrites its config file, so it gets one of its own. A
	// failover is not what these tests are about: the master is declared
	// down only after a minute of silence, far beyond any test's pause.
	conf := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %s 60000
sentinel failover-timeout %s 120000
`, sentinel, dir, SentinelMaster, master, SentinelMaster, SentinelMaster)), 0o644); err != nil {
		return "", "", err
	}
	if err := startProc(dir, "sentinel", bins[1], conf); err != nil {
		return "", "", err
	}
	url = fmt.Sprintf("redis-sentinel://127.0.0.1:%d/?master=%s", sentinel, SentinelMaster)
	if err := waitSentinel(url, 30*time.Second); err != nil {
		return "", "", fmt.Errorf("%w\n%s", err, logTail(dir, "sentinel"))
	}
	return url, "", nil
}

// waitSentinel waits until the sentinel names the master, the master has
// a replica in sync, and a write through the failover client works.
func waitSentinel(url string, d time.Duration) error {
	hosts, err := redisHosts(url)
	if err != nil {
		return fmt.Errorf("sentinel url: %w", err)
	}
	_, query, _ := strings.Cut(url, "?")
	name := ""
	for _, kv := range strings.Split(query, "&") {
		if v, ok := strings.CutPrefix(kv, "master="); ok {
			name = v
		}
	}
	if name == "" {
		return errors.New("sentinel url has no ?master=NAME")
	}
	s := redis.NewSentinelClient(&redis.Options{Addr: hosts[0]})
	defer s.Close()
	deadline := time.Now().Add(d)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		last = func() error {
			addr, err := s.GetMasterAddrByName(ctx, name).Result()
			if err != nil {
				return fmt.Errorf("sentinel get-master-addr-by-name: %w", err)
			}
			m := redis.NewClient(&redis.Options{Addr: addr[0] + ":" + addr[1]})
			defer m.Close()
			info, err := m.Info(ctx, "replication").Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "role:master") || !strings.Contains(info, "state=online") {
				return fmt.Errorf("master %s has no replica in sync yet:\n%s", addr, info)
			}
			c, err := stack.OpenRedis(url)
			if err != nil {
				return err
			}
			defer c.Close()
			return c.Set(ctx, "spool-test:ready", "1", time.Minute).Err()
		}()
		cancel()
		if last == nil {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("sentinel %s not ready: %w", hosts[0], last)
}
