// Command admission measures what admission costs and what it promises,
// side by side in one invocation (one binary, Redis, worker and machine).
//
// Throughput: three arms, interleaved within every round (the arm that
// goes first rotates from round to round), medians of the rounds:
//
//   - off: no policy published (admission's one atomic load);
//   - on: a policy of four tenants, one concurrency rule matching every
//     run with a max far above the capacity, and every ceiling far away
//     (max_running, spend per day and month, starts per minute, runs in
//     flight): it admits everything, so the difference is admission's own
//     cost (a request per start, a claim, a release; the ceilings'
//     bookkeeping and allowances);
//   - on+keys: on, with an idempotency key on every start as well.
//
// Each arm runs the same starts (tenants t0..t3 in turn, 8 producers) on
// one in-process worker of -concurrency slots and the scripted model
// with zero latency: -threads single-turn threads (the least work per
// admission: the worst case) and -multi three-turn threads (a file write,
// a read, the answer), on a redis-server of its own (standalone) and on
// a three-master Redis Cluster (sharded namespace: tenants spread over
// the nodes). Per row: threads/s (first start to the last thread's end),
// Redis CPU per thread (INFO cpu, every master), the time in Redis's
// scripts per thread (INFO commandstats of FCALL, EVALSHA and EVAL, the
// commands they run included), this process's CPU per thread (the
// worker, the producers, the waiting client), start latency p50/p99
// (registration to claim, from the records: with every thread queued at
// once it is mostly the backlog's wait), and tenant t0's script calls
// per second in its slot (counted by a client hook: admission's and the
// idempotency keys' scripts, on t0's node). To tell where the cost goes,
// -commands prints each round's busiest Redis commands, -policy runs the
// on arms with less of their policy and -task-check sets the workers'
// asynq TaskCheckInterval.
//
// Fairness (standalone, capacity -fair-concurrency, activations of
// -activation): a newcomer B of -newcomers runs behind a backlog of
// -backlog runs of tenant A at equal weights, admission off and on (B's
// k-th start in slot turnovers, activation length / capacity); two
// tenants kept backlogged for -jain-time at weights 1:1 and 3:1,
// Jain's index over slot-seconds/weight in 5 s windows; and a priority-1
// run behind -prio-backlog waiting priority-3 runs of its tenant, off and
// on: how many of them started between its request and its start.
//
//	go run ./bench/admission                       # a few minutes on 2 cores
//	go run ./bench/admission -full                 # the counts: 20,000 and 5,000 threads
//	go run ./bench/admission -topology cluster -fairness=false -threads 2000 -rounds 5
//
// -cpuprofile PREFIX writes a CPU profile of the process (the worker and
// the producers) per throughput arm and round, PREFIX-<topology>-
// <workload>-<arm>-<round>.pprof, to compare arms with go tool pprof
// -diff_base.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"
)

// options are the command's flags.
type options struct {
	threads, multi, rounds, conc, producers int
	latency                                 time.Duration
	topology                                string
	redisURL, clusterURL                    string
	cpuprofile                              string
	commands                                int
	taskCheck                               time.Duration
	policy                                  string
	throughput, fairness                    bool

	fairConc, backlog, newcomers, prioBacklog int
	activation, prioActivation, jainFor       time.Duration
}

func main() {
	var o options
	flag.IntVar(&o.threads, "threads", 5000, "single-turn threads per arm and round (the issue's 20,000 with -full)")
	flag.IntVar(&o.multi, "multi", 1000, "three-turn threads per arm and round (the issue's 5,000 with -full)")
	full := flag.Bool("full", false, "the issue's counts: -threads 20000 -multi 5000")
	flag.IntVar(&o.rounds, "rounds", 3, "rounds of the throughput arms (medians)")
	flag.IntVar(&o.conc, "concurrency", 16, "the worker's slots in the throughput arms")
	flag.IntVar(&o.producers, "producers", 8, "goroutines starting threads")
	flag.DurationVar(&o.latency, "latency", 0, "the model's latency per call in the throughput arms (0: none, admission's worst case; a second or more: what a fleet's activations take, where slots bound throughput)")
	flag.StringVar(&o.topology, "topology", "both", "standalone, cluster or both")
	flag.StringVar(&o.redisURL, "redis", os.Getenv("SPOOL_BENCH_REDIS_URL"), "standalone Redis URL (default: start redis-server)")
	flag.StringVar(&o.clusterURL, "redis-cluster", os.Getenv("SPOOL_BENCH_REDIS_CLUSTER_URL"), "redis-cluster:// URL (default: start three nodes)")
	flag.StringVar(&o.cpuprofile, "cpuprofile", "", "write a CPU profile per throughput arm and round to PREFIX-...pprof")
	flag.StringVar(&o.policy, "policy", "full", "the on arms' policy: full (the rule and the far ceilings), rule (the rule only) or tenants (the four tenants only): to attribute admission's cost")
	flag.DurationVar(&o.taskCheck, "task-check", 0, "the workers' TaskCheckInterval, how long asynq's processor sleeps when it finds its queues empty (0: the worker's default)")
	flag.IntVar(&o.commands, "commands", 0, "print each throughput round's N busiest Redis commands (INFO commandstats, calls and µs per thread)")
	flag.BoolVar(&o.throughput, "throughput", true, "run the throughput arms")
	flag.BoolVar(&o.fairness, "fairness", true, "run the fairness and priority rows (standalone)")
	flag.IntVar(&o.fairConc, "fair-concurrency", 16, "capacity of the fairness rows")
	flag.IntVar(&o.backlog, "backlog", 1000, "tenant A's backlog in the newcomer row")
	flag.IntVar(&o.newcomers, "newcomers", 20, "tenant B's runs in the newcomer row")
	flag.DurationVar(&o.activation, "activation", 500*time.Millisecond, "length of an activation in the fairness rows (the model's latency)")
	flag.DurationVar(&o.jainFor, "jain-time", 30*time.Second, "how long the Jain rows keep both tenants backlogged (about)")
	flag.IntVar(&o.prioBacklog, "prio-backlog", 200, "waiting priority-3 runs in the priority row")
	flag.DurationVar(&o.prioActivation, "prio-activation", 200*time.Millisecond, "length of an activation in the priority row")
	flag.Parse()
	if *full {
		o.threads, o.multi = 20000, 5000
	}
	if err := run(context.Background(), o); err != nil {
		fmt.Fprintln(os.Stderr, "admission:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if o.threads < 1 || o.multi < 0 || o.rounds < 1 || o.conc < 1 || o.producers < 1 {
		return fmt.Errorf("-threads, -rounds, -concurrency and -producers must be at least 1, -multi at least 0")
	}
	if _, ok := onPolicies[o.policy]; !ok {
		return fmt.Errorf("-policy is full, rule or tenants, not %q", o.policy)
	}
	var topos []string
	switch o.topology {
	case "standalone", "cluster":
		topos = []string{o.topology}
	case "both":
		topos = []string{"standalone", "cluster"}
	default:
		return fmt.Errorf("-topology is standalone, cluster or both, not %q", o.topology)
	}
	begin := time.Now()
	fmt.Printf("admission: %d rounds; single-turn %d threads, three-turn %d threads; one worker of %d slots, %d producers; the on arms' policy %s; %s\n",
		o.rounds, o.threads, o.multi, o.conc, o.producers, o.policy, begin.UTC().Format(time.RFC3339))
	if o.throughput {
		var rows []*row
		for _, topo := range topos {
			r, err := throughput(ctx, o, topo)
			if err != nil {
				return fmt.Errorf("%s: %w", topo, err)
			}
			rows = append(rows, r...)
		}
		printThroughput(os.Stdout, rows)
	}
	if o.fairness {
		if err := fairness(ctx, o); err != nil {
			return err
		}
	}
	fmt.Printf("admission: done in %s\n", time.Since(begin).Round(time.Second))
	return nil
}
