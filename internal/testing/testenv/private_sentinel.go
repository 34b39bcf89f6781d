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
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/stack"
)

// PrivateSentinel is a Redis master, one replica of it and a Sentinel
// watching them, of one test's own, which the test may break to make a
// real failover lose writes: cut the replica off (CutOffReplica: it
// receives nothing more), write, kill the master, let the replica go on
// (SIGCONT): the Sentinel promotes it after DownAfter, without what it
// never received, as asynchronous replication loses acknowledged writes. Its
// Redis is reached through a redis-sentinel:// URL, as spool is.
type PrivateSentinel struct {
	*Redis
	// Master and Replica are the data nodes as started; after a failover
	// Replica is the master (Roles says which is which now).
	Master, Replica *SentinelNode
	// DownAfter is the Sentinel's down-after-milliseconds.
	DownAfter time.Duration
	sentinel  *SentinelNode
	name, dir string
}

// SentinelNode is one process of a PrivateSentinel.
type SentinelNode struct {
	Addr string
	name string
	args []string
	bin  string
	dir  string
	nodeProcess
}

// PrivateSentinelMaster is the master name of a PrivateSentinel.
const PrivateSentinelMaster = "spool-private"

// NewPrivateSentinel starts a master, its replica and a Sentinel (quorum
// 1) for t alone, every one a redis-server from PATH (the Sentinel with
// --sentinel), the Sentinel declaring a master down after downAfter. It
// waits until the replica is in sync and the Sentinel names the master.
// Without redis-server it skips, or fails when RequireReal.
func NewPrivateSentinel(t testing.TB, downAfter time.Duration) *PrivateSentinel {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if RequireReal() {
			t.Fatalf("testenv: SPOOL_TEST_REQUIRE_REAL=1 but no redis-server on PATH for a private Sentinel")
		}
		t.Skip("no redis-server on PATH: the test needs a Sentinel of its own")
	}
	ports, err := freePorts(3)
	if err != nil {
		t.Fatal(err)
	}
	ps := &PrivateSentinel{DownAfter: downAfter, name: PrivateSentinelMaster, dir: t.TempDir()}
	addr := func(p int) string { return fmt.Sprintf("127.0.0.1:%d", p) }
	data := func(name string, port int, more ...string) *SentinelNode {
		dir := filepath.Join(ps.dir, name)
		args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--repl-diskless-sync-delay", "0"}, more...)
		return &SentinelNode{Addr: addr(port), name: name, args: args, bin: bin, dir: dir}
	}
	ps.Master = data("master", ports[0])
	ps.Replica = data("replica", ports[1], "--replicaof", "127.0.0.1", strconv.Itoa(ports[0]))
	conf := filepath.Join(ps.dir, "sentinel", "sentinel.conf")
	ps.sentinel = &SentinelNode{Addr: addr(ports[2]), name: "sentinel", args: []string{conf, "--sentinel"}, bin: bin,
		dir: filepath.Dir(conf)}
	t.Cleanup(func() {
		for _, n := range []*SentinelNode{ps.sentinel, ps.Replica, ps.Master} {
			n.Cont()
			n.Kill()
		}
	})
	for _, n := range []*SentinelNode{ps.Master, ps.Replica} {
		if err := n.Start(); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(ps.sentinel.dir, 0o755); err != nil {
		t.Fatal(err)
	}
	// A failover as soon as the master is down: quorum 1, and the
	// replica is not held back for having lost its link for a while.
	if err := os.WriteFile(conf, []byte(fmt.Sprintf(`port %d
bind 127.0.0.1
protected-mode no
dir %s
sentinel monitor %s 127.0.0.1 %d 1
sentinel down-after-milliseconds %s %d
sentinel failover-timeout %s 2000
sentinel parallel-syncs %s 1
`, ports[2], ps.sentinel.dir, ps.name, ports[0], ps.name, downAfter.Milliseconds(), ps.name, ps.name)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ps.sentinel.Start(); err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("redis-sentinel://%s/?master=%s", ps.sentinel.Addr, ps.name)
	if err := waitSentinel(url, 30*time.Second); err != nil {
		t.Fatalf("%v\n%s", err, logTail(ps.dir, "sentinel"))
	}
	c, err := stack.OpenRedis(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ps.Redis = &Redis{URL: url, Addr: ps.sentinel.Addr, Universal: c, Namespace: "t" + RandomID(6), Topology: Sentinel}
	return ps
}

// Start runs the node (again) and waits until it answers.
func (n *SentinelNode) Start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return nil
	}
	if err := os.MkdirAll(n.dir, 0o755); err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(filepath.Dir(n.dir), n.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.bin, n.args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", n.name, err)
	}
	n.cmd, n.logf = cmd, logf
	if err := stack.WaitRedis("redis://"+n.Addr+"/0", 10*time.Second); err != nil {
		return fmt.Errorf("%w\n%s", err, logTail(filepath.Dir(n.dir), n.name))
	}
	return nil
}

// startReplicaOf starts the node again as a replica of addr (with no
// data of its own: it persists nothing), as the Sentinel would make it
// once it saw it back.
func (n *SentinelNode) startReplicaOf(addr string) error {
	host, port, _ := strings.Cut(addr, ":")
	n.mu.Lock()
	args := n.args
	for i := 0; i+2 < len(args); i++ {
		if args[i] == "--replicaof" {
			args = append(args[:i:i], args[i+3:]...)
			break
		}
	}
	args = append(args, "--replicaof", host, port)
	n.args = args
	n.mu.Unlock()
	return n.Start()
}

// Stop freezes the node (SIGSTOP): it neither answers nor receives
// anything until Cont, as a node cut off by a partition or a long pause.
func (n *SentinelNode) Stop() { n.signal(syscall.SIGSTOP) }

// Cont lets a stopped node go on (SIGCONT).
func (n *SentinelNode) Cont() { n.signal(syscall.SIGCONT) }

func (n *SentinelNode) signal(s syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(s)
	}
}

// CutOffReplica freezes the replica (Stop) and has the master drop its
// replication link, so that nothing the master writes from now on
// reaches the replica, not even what its kernel would have buffered for
// the frozen process: the master acknowledges writes the replica will
// never have. The replica's Cont lets it go on, behind.
func (ps *PrivateSentinel) CutOffReplica(ctx context.Context) error {
	master, replica, err := ps.Roles(ctx)
	if err != nil {
		return err
	}
	replica.Stop()
	c := redis.NewClient(&redis.Options{Addr: master.Addr})
	defer c.Close()
	return c.ClientKillByFilter(ctx, "TYPE", "replica").Err()
}

// Roles are the data nodes by what they are now: the master the
// Sentinel names, and the other.
func (ps *PrivateSentinel) Roles(ctx context.Context) (master, replica *SentinelNode, err error) {
	addr, err := ps.MasterAddr(ctx)
	if err != nil {
		return nil, nil, err
	}
	switch addr {
	case ps.Master.Addr:
		return ps.Master, ps.Replica, nil
	case ps.Replica.Addr:
		return ps.Replica, ps.Master, nil
	}
	return nil, nil, fmt.Errorf("the sentinel names %s, neither node", addr)
}

// Failover is what FailOver measured.
type Failover struct {
	Old, New string        // the master before and after
	Promoted time.Duration // from the kill to the new master
	Resynced time.Duration // from the kill to the old master back, a replica in sync
}

// FailOver makes a failover that loses the writes of lossWindow: it cuts
// the replica off (CutOffReplica), lets the master take writes alone for
// lossWindow, kills it, lets the replica go on, waits for the Sentinel to
// promote it, then starts the old master again, which the Sentinel makes
// a replica of the new one, and waits until it is in sync: ready for the
// next.
func (ps *PrivateSentinel) FailOver(ctx context.Context, lossWindow time.Duration) (Failover, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	master, replica, err := ps.Roles(ctx)
	if err != nil {
		return Failover{}, err
	}
	f := Failover{Old: master.Addr}
	if err := ps.InSync(ctx); err != nil {
		return f, err
	}
	if err := ps.CutOffReplica(ctx); err != nil {
		return f, err
	}
	time.Sleep(lossWindow)
	if f.New, f.Promoted, err = ps.promote(ctx, master, replica); err != nil {
		return f, err
	}
	killed := time.Now().Add(-f.Promoted)
	if err := master.startReplicaOf(f.New); err != nil {
		return f, err
	}
	if err := ps.InSync(ctx); err != nil {
		return f, fmt.Errorf("the old master %s is no replica in sync: %w", master.Addr, err)
	}
	f.Resynced = time.Since(killed)
	return f, nil
}

// LoseMaster kills the master and lets the replica that CutOffReplica
// froze go on, until the Sentinel has promoted it: what the master took
// alone since the cut is lost. It returns the new master's address and
// how long its promotion took after the kill. The old master stays down.
func (ps *PrivateSentinel) LoseMaster(ctx context.Context) (string, time.Duration, error) {
	master, replica, err := ps.Roles(ctx)
	if err != nil {
		return "", 0, err
	}
	return ps.promote(ctx, master, replica)
}

// promote kills master, lets replica go on and waits for the Sentinel to
// name another master (LoseMaster).
func (ps *PrivateSentinel) promote(ctx context.Context, master, replica *SentinelNode) (string, time.Duration, error) {
	master.Kill()
	killed := time.Now()
	replica.Cont()
	addr, err := ps.Promoted(ctx, master.Addr)
	return addr, time.Since(killed), err
}

// Client is a plain client of the node, closed at t's cleanup.
func (n *SentinelNode) Client(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: n.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// MasterAddr is the master the Sentinel names now.
func (ps *PrivateSentinel) MasterAddr(ctx context.Context) (string, error) {
	s := redis.NewSentinelClient(&redis.Options{Addr: ps.sentinel.Addr})
	defer s.Close()
	addr, err := s.GetMasterAddrByName(ctx, ps.name).Result()
	if err != nil {
		return "", err
	}
	return addr[0] + ":" + addr[1], nil
}

// Promoted waits until the Sentinel names another master than old and
// that node says it is a master, and returns its address.
func (ps *PrivateSentinel) Promoted(ctx context.Context, old string) (string, error) {
	var addr string
	err := poll(ctx, func() error {
		a, err := ps.MasterAddr(ctx)
		if err != nil {
			return err
		}
		if a == old {
			return errors.New("the sentinel still names " + old)
		}
		c := redis.NewClient(&redis.Options{Addr: a})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		if !strings.Contains(info, "role:master") {
			return fmt.Errorf("%s is not a master yet", a)
		}
		addr = a
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("no failover from %s: %w\n%s", old, err, logTail(ps.dir, "sentinel"))
	}
	return addr, nil
}

// InSync waits until the replica has received everything the master
// wrote so far: a write of this connection's, then WAIT for the replica
// to acknowledge it (replication is in order). The master is the one the
// Sentinel names at each try.
func (ps *PrivateSentinel) InSync(ctx context.Context) error {
	return poll(ctx, func() error {
		master, _, err := ps.Roles(ctx)
		if err != nil {
			return err
		}
		c := redis.NewClient(&redis.Options{Addr: master.Addr, PoolSize: 1})
		defer c.Close()
		if err := c.Incr(ctx, "spool-test:in-sync").Err(); err != nil {
			return err
		}
		n, err := c.Wait(ctx, 1, 100*time.Millisecond).Result()
		if err != nil {
			return err
		}
		if n < 1 {
			return errors.New("the replica has not acknowledged the master's offset")
		}
		return nil
	})
}
