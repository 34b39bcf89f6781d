// Command cluster measures how spool's Redis load spreads over a Redis
// Cluster: -trees trees (a root that spawns -children children in one
// turn and waits for them, each child -turns turns of file tools and an
// answer) on a scripted model of -latency per call, run by one worker of
// -concurrency slots against a three-node Cluster on loopback. Printed,
// per node: its share of spool's keys, its Redis CPU and its share of the
// total, and the busiest commands; and the total Redis CPU per turn.
//
//	go run ./bench/cluster -trees 1000 -children 2 -turns 3 -latency 200ms
//
// With no -redis it starts the three redis-server nodes from PATH (as the
// tests' Cluster topology does). The namespace is new and sharded
// (registry.DefaultClusterShards, or -shards); -queues spreads each
// logical queue over that many asynq queues (queue.Spread).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/bench/internal/benchenv"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

func main() {
	trees := flag.Int("trees", 1000, "trees (roots)")
	children := flag.Int("children", 2, "children per root, spawned in one turn")
	turns := flag.Int("turns", 3, "turns per child (at least 1)")
	latency := flag.Duration("latency", 200*time.Millisecond, "the model's time per call")
	conc := flag.Int("concurrency", 4000, "the worker's concurrency")
	shards := flag.Int("shards", registry.DefaultClusterShards, "shards of the namespace's keys")
	redisURL := flag.String("redis", os.Getenv("SPOOL_BENCH_REDIS_CLUSTER_URL"), "redis-cluster:// URL (default: start three nodes)")
	flag.Parse()
	if err := run(*trees, *children, *turns, *conc, *shards, *latency, *redisURL); err != nil {
		fmt.Fprintln(os.Stderr, "cluster:", err)
		os.Exit(1)
	}
}

// script is the model: a root spawns children children in its first turn
// and answers in its second; a child calls a file tool turns-1 times and
// answers.
func script(children, turns int, latency time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "price: {input_per_mtok: 1.00, output_per_mtok: 5.00}\nlatency: %s\ndirectives:\n  \"tree/root\":\n    - tool_calls:\n", latency)
	for range children {
		b.WriteString("        - {tool: rye/agent/threads/thread_directive, input: {directive_name: tree/kid}}\n")
	}
	b.WriteString("      usage: {input: 100, output: 10}\n    - text: done\n      usage: {input: 100, output: 10}\n  \"tree/kid\":\n")
	return b.String() + benchenv.FileTurns(turns)
}

// node is one master's figures.
type node struct {
	addr  string
	cpu   time.Duration
	keys  int64
	stats []benchenv.CommandStat
}

// nodes samples every master: its Redis CPU, its key count, its busiest
// commands.
func nodes(ctx context.Context, cc *redis.ClusterClient) (map[string]*node, error) {
	var mu sync.Mutex
	out := map[string]*node{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n := &node{addr: c.Options().Addr}
		for k, v := range benchenv.Info(ctx, c, "cpu") {
			if k == "used_cpu_sys" || k == "used_cpu_user" {
				f, _ := strconv.ParseFloat(v, 64)
				n.cpu += time.Duration(f * float64(time.Second))
			}
		}
		var err error
		if n.keys, err = c.DBSize(ctx).Result(); err != nil {
			return err
		}
		n.stats = benchenv.CommandStats(ctx, c)
		mu.Lock()
		out[n.addr] = n
		mu.Unlock()
		return nil
	})
	return out, err
}

func run(trees, children, turns, conc, shards int, latency time.Duration, redisURL string) error {
	if turns < 1 || trees < 1 || children < 0 {
		return fmt.Errorf("-trees and -turns must be at least 1, -children at least 0")
	}
	ctx := context.Background()
	if redisURL == "" {
		url, stop, err := testenv.StartCluster()
		defer stop()
		if err != nil {
			return err
		}
		redisURL = url
	}
	rdb, tmp, stop, err := benchenv.Scratch("spool-bench-cluster-", redisURL)
	if err != nil {
		return err
	}
	defer stop()
	cc, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return fmt.Errorf("%s is no Redis Cluster", redisURL)
	}
	ns := fmt.Sprintf("cluster-%d", time.Now().UnixNano())
	ks, err := registry.Layout(ctx, rdb, keyspace.New(ns), shards, true)
	if err != nil {
		return err
	}
	f, err := treeFleet(ctx, rdb, tmp, ns, ks.Shards(), conc, children, turns, latency)
	if err != nil {
		return err
	}
	defer f.Close()

	fmt.Printf("cluster: %d trees (a root and %d children of %d turns), model latency %s, one worker of concurrency %d, %d shards\n",
		trees, children, turns, latency, conc, ks.Shards())
	o, err := runTrees(ctx, cc, f, trees)
	if err != nil {
		return err
	}
	o.print(trees*(2+children*turns), turns)
	return nil
}

// treeFleet is the fleet of the bench's project, in namespace ns of the
// given shards: a root that spawns children children in one turn, each a
// kid of turns turns, on the scripted model of latency per call.
func treeFleet(ctx context.Context, rdb redis.UniversalClient, tmp, ns string, shards, conc, children, turns int, latency time.Duration) (*benchenv.Fleet, error) {
	root := strings.Replace(benchenv.Directive("root", `turns="4" spawns="`+strconv.Itoa(children)+`"`),
		"<tool>rye/file-system/*</tool>", "<tool>rye/file-system/*</tool><tool>rye/agent/threads/thread_directive</tool>", 1)
	return benchenv.NewFleet(ctx, rdb, blobstore.NewMemory(), benchenv.FleetConfig{
		Namespace: ns, Shards: shards, Dir: tmp, Concurrency: conc,
		Files: map[string]string{
			".ai/directives/tree/root.md": root,
			".ai/directives/tree/kid.md":  benchenv.Directive("kid", fmt.Sprintf(`turns="%d"`, turns+2)),
		},
		ScriptPath: "scripts/tree.yaml", Script: script(children, turns, latency),
	})
}

// outcome is what runTrees measured: every master's figures before and
// after, the time from the first start to the last end, and how the roots
// ended.
type outcome struct {
	before, after map[string]*node
	elapsed       time.Duration
	ended         map[thread.Status]int
}

// runTrees resets every master's command stats, then starts trees roots
// on f and waits for them all to end, sampling the masters before and
// after.
func runTrees(ctx context.Context, cc *redis.ClusterClient, f *benchenv.Fleet, trees int) (*outcome, error) {
	if err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error { return c.ConfigResetStat(ctx).Err() }); err != nil {
		return nil, err
	}
	before, err := nodes(ctx, cc)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	ids, err := f.StartThreads(ctx, "tree/root", trees, 16)
	if err != nil {
		return nil, err
	}
	res, err := f.O.Wait(ctx, ids, 30*time.Minute)
	if err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	after, err := nodes(ctx, cc)
	if err != nil {
		return nil, err
	}
	ended := map[thread.Status]int{}
	for _, id := range ids {
		ended[res[id].Status]++
	}
	return &outcome{before: before, after: after, elapsed: elapsed, ended: ended}, nil
}

// print prints the outcome of total turns (children of turns turns each):
// the totals, then per node, in address order, its share of the keys and
// of the Redis CPU and its three busiest commands, per turn.
func (o *outcome) print(total, turns int) {
	var cpu time.Duration
	var keys int64
	addrs := make([]string, 0, len(o.after))
	for a, n := range o.after {
		addrs = append(addrs, a)
		cpu += n.cpu - o.before[a].cpu
		keys += n.keys
	}
	sort.Strings(addrs)
	fmt.Printf("cluster: all ended in %.1fs; roots: %v; %d turns (roots 2 each, children %d each)\n", o.elapsed.Seconds(), o.ended, total, turns)
	fmt.Printf("cluster: Redis CPU %.1f µs per turn over %d nodes\n", float64(cpu.Microseconds())/float64(total), len(addrs))
	for _, a := range addrs {
		n, b := o.after[a], o.before[a]
		d := n.cpu - b.cpu
		fmt.Printf("  node %d: %5.1f%% of the keys, %5.1f µs per turn = %4.1f%% of the Redis CPU; busiest:", indexOf(addrs, a),
			100*float64(n.keys)/float64(max(keys, 1)), float64(d.Microseconds())/float64(total), 100*float64(d)/float64(max(cpu, 1)))
		for i, s := range n.stats {
			if i == 3 {
				break
			}
			fmt.Printf(" %s %.1f µs", s.Name, float64(s.Usec)/float64(total))
		}
		fmt.Println()
	}
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
