// Command fleet measures what a fleet-sized load costs Redis and a
// worker: -threads threads of -turns turns each (a file write, a file
// read, then the answer) on a scripted model that takes -latency per call,
// all run at once by one worker of -concurrency slots, as a fleet of
// agents waiting on a real model would be. Printed: Redis CPU per turn
// (INFO cpu), the worker process's CPU per turn and its peak RSS, Redis's
// peak memory, the busiest Redis commands per turn (INFO commandstats),
// and the time until every thread ended. With -by-script, also each
// script's calls and Redis time per turn, from Redis's SLOWLOG (which
// costs Redis CPU of its own: compare CPU figures of runs without it).
//
//	go run ./bench/fleet -threads 10000 -turns 3 -latency 1s -concurrency 10000
//	go run ./bench/fleet -threads 2000 -concurrency 2000 -by-script
//
// With no -redis it starts a redis-server from PATH on a free port. The
// blob store is in memory.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/spool-run/spool/bench/internal/benchenv"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/thread"
)

func main() {
	threads := flag.Int("threads", 10000, "threads")
	turns := flag.Int("turns", 3, "turns per thread (at least 1; all but the last call a file tool)")
	latency := flag.Duration("latency", time.Second, "the model's time per call")
	conc := flag.Int("concurrency", 10000, "the worker's concurrency")
	producers := flag.Int("producers", 16, "goroutines starting threads")
	redisURL := benchenv.RedisFlag()
	byScript := flag.Bool("by-script", false, "print Redis time per script (SLOWLOG; adds Redis CPU)")
	shards := flag.Int("shards", 1, "shards of the namespace's keys, a power of two (as spool's --redis-shards); more than 1 also spreads the queue over that many asynq lanes, up to 8")
	flag.Parse()
	if err := run(*threads, *turns, *conc, *producers, *shards, *latency, *redisURL, *byScript); err != nil {
		fmt.Fprintln(os.Stderr, "fleet:", err)
		os.Exit(1)
	}
}

// script is the model: turns-1 tool calls, alternately a write and a read
// of the thread's own file, then the answer.
func script(turns int, latency time.Duration) string {
	return fmt.Sprintf("price: {input_per_mtok: 1.00, output_per_mtok: 5.00}\nlatency: %s\ndirectives:\n  \"fleet/work\":\n", latency) +
		benchenv.FileTurns(turns)
}

func run(n, turns, conc, producers, shards int, latency time.Duration, redisURL string, byScript bool) error {
	if turns < 1 || n < 1 {
		return fmt.Errorf("-threads and -turns must be at least 1")
	}
	ctx := context.Background()
	rdb, tmp, stop, err := benchenv.Scratch("spool-bench-fleet-", redisURL)
	if err != nil {
		return err
	}
	defer stop()
	f, err := benchenv.NewFleet(ctx, rdb, blobstore.NewMemory(), benchenv.FleetConfig{
		Namespace: fmt.Sprintf("fleet-%d", time.Now().UnixNano()), Shards: shards, Dir: tmp, Concurrency: conc,
		Files:      map[string]string{".ai/directives/fleet/work.md": benchenv.Directive("work", fmt.Sprintf(`turns="%d"`, turns+2))},
		ScriptPath: "scripts/fleet.yaml", Script: script(turns, latency),
	})
	if err != nil {
		return err
	}
	defer f.Close()
	o := f.O

	fmt.Printf("fleet: %d threads x %d turns, model latency %s, one worker of concurrency %d, %d shards (%d asynq lanes), redis %s\n",
		n, turns, latency, conc, o.Shards(), o.Lanes(), benchenv.Info(ctx, rdb, "server")["redis_version"])
	var sl *scriptLog
	if byScript {
		if sl, err = startScriptLog(ctx, rdb); err != nil {
			return err
		}
	}
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		return err
	}
	c0 := benchenv.SampleCPU(ctx, rdb)
	start := time.Now()
	ids, err := f.StartThreads(ctx, "fleet/work", n, producers)
	if err != nil {
		return err
	}
	started := time.Since(start)
	res, err := o.Wait(ctx, ids, 30*time.Minute)
	if err != nil {
		return err
	}
	elapsed := time.Since(start)
	cpu := benchenv.SampleCPU(ctx, rdb).Sub(c0)
	stats := benchenv.CommandStats(ctx, rdb)
	ended := map[thread.Status]int{}
	for _, id := range ids {
		ended[res[id].Status]++
	}
	total := n * turns
	fmt.Printf("fleet: all started in %.1fs, all ended in %.1fs (ideal %.1fs: %d calls of %s); threads: %v\n",
		started.Seconds(), elapsed.Seconds(), (time.Duration(turns) * latency).Seconds(), turns, latency, ended)
	fmt.Printf("fleet: per turn (%d turns): Redis CPU %.1f µs, worker process CPU %.1f µs\n",
		total, float64(cpu.Redis.Microseconds())/float64(total), float64(cpu.Self.Microseconds())/float64(total))
	fmt.Printf("fleet: peak RSS of the worker process %d MiB; Redis used_memory_peak %s\n",
		benchenv.PeakRSS()>>20, benchenv.Info(ctx, rdb, "memory")["used_memory_peak_human"])
	var usec int64
	for _, s := range stats {
		usec += s.Usec
	}
	fmt.Printf("fleet: Redis command time %.1f µs per turn; the busiest commands (calls and µs per turn):\n", float64(usec)/float64(total))
	for i, s := range stats {
		if i == 10 {
			break
		}
		fmt.Printf("  %-22s %6.2f calls  %6.1f µs\n", s.Name, float64(s.Calls)/float64(total), float64(s.Usec)/float64(total))
	}
	if sl != nil {
		printScripts(sl.finish(ctx), total, sl.lost)
	}
	return nil
}
