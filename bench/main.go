// Command bench measures spool end to end next to raw asynq, on the same
// Redis, in one run:
//
//   - raw: N no-op asynq tasks enqueued while an asynq server of the given
//     concurrency serves them; tasks per second from the first enqueue to
//     the last handler's call (a counter in the handler).
//   - spool: N single-turn threads (the scripted provider with zero
//     latency) started through the orchestrator and run by a spool worker
//     of the same concurrency: enqueue → claim → model call → checkpoint →
//     finalize (ledger release, registry, thread.json); threads per second
//     from the first start to the last thread's end event (the status
//     message finalize publishes), after which every record is read and
//     checked. -until records stops the clock when Orchestrator.Wait has
//     read every record instead, which adds the reads a waiting client
//     makes (the only way before 2026-11-24's third session).
//
// Rounds alternate raw and spool; the medians and their ratio are printed.
//
//	go run ./bench -n 1000 -concurrency 8 -rounds 3
//
// With no -redis it starts a redis-server from PATH on a free port. The
// blob store is a local directory (-store DIR, default a temp dir); set
// SPOOL_S3_BUCKET etc. to measure against S3-compatible storage instead.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/bench/internal/benchenv"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// until is -until: what stops a spool round's clock.
var until string

func main() {
	n := flag.Int("n", 1000, "tasks / threads per round")
	conc := flag.Int("concurrency", 8, "worker concurrency (both sides)")
	producers := flag.Int("producers", 4, "goroutines enqueueing (both sides)")
	rounds := flag.Int("rounds", 3, "rounds of each")
	redisURL := benchenv.RedisFlag()
	withRaw := flag.Bool("raw", true, "run the raw asynq rounds (false: spool only, for profiling)")
	storeDir := flag.String("store", "", "local blob store directory (default: a temp dir; \"mem\": in memory, to separate storage cost)")
	flag.StringVar(&until, "until", "ended", "when a spool round's clock stops: \"ended\", at the last thread's end event (as a raw round's stops at its last handler); \"records\", when Orchestrator.Wait has read every record")
	flag.Parse()
	if until != "ended" && until != "records" {
		fmt.Fprintln(os.Stderr, "bench: -until is ended or records")
		os.Exit(2)
	}
	if err := run(*n, *conc, *producers, *rounds, *redisURL, *storeDir, *withRaw); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, conc, producers, rounds int, redisURL, storeDir string, withRaw bool) error {
	ctx := context.Background()
	rdb, tmp, stop, err := benchenv.Scratch("spool-bench-", redisURL)
	if err != nil {
		return err
	}
	defer stop()
	if storeDir == "" {
		storeDir = filepath.Join(tmp, "blobs")
	}
	if prof := os.Getenv("SPOOL_BENCH_CPUPROFILE"); prof != "" {
		f, err := os.Create(prof)
		if err != nil {
			return err
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	var store blobstore.Store
	if os.Getenv("SPOOL_S3_BUCKET") != "" {
		cfg, err := blobstore.S3ConfigFromEnv()
		if err != nil {
			return err
		}
		if store, err = blobstore.NewS3(ctx, cfg); err != nil {
			return err
		}
	} else if storeDir == "mem" {
		store = blobstore.NewMemory()
	} else if store, err = blobstore.NewLocal(storeDir); err != nil {
		return err
	}
	fmt.Printf("bench: n=%d concurrency=%d producers=%d rounds=%d redis=%s store=%T\n", n, conc, producers, rounds, cmp.Or(redisURL, "redis-server on a free port"), store)
	var raws, spools []float64
	for r := 0; r < rounds; r++ {
		c0 := benchenv.SampleCPU(ctx, rdb)
		raw := 1.0
		if withRaw {
			if raw, err = rawRound(ctx, rdb, n, conc, producers, r); err != nil {
				return err
			}
		}
		c1 := benchenv.SampleCPU(ctx, rdb)
		sp, err := spoolRound(ctx, rdb, store, filepath.Join(tmp, fmt.Sprint("round", r)), n, conc, producers, r)
		if err != nil {
			return err
		}
		c2 := benchenv.SampleCPU(ctx, rdb)
		fmt.Printf("round %d: raw asynq %.0f tasks/s, spool %.0f threads/s, ratio %.2f; CPU per task/thread (bench process, redis): raw %s, spool %s\n",
			r+1, raw, sp, sp/raw, c1.Sub(c0).Per(n), c2.Sub(c1).Per(n))
		raws, spools = append(raws, raw), append(spools, sp)
	}
	mr, ms := benchenv.Median(raws), benchenv.Median(spools)
	fmt.Printf("median: raw asynq %.0f tasks/s, spool %.0f threads/s, ratio %.2f\n", mr, ms, ms/mr)
	return nil
}

// rawRound times n no-op asynq tasks through the whole path: p producers
// enqueue them while an asynq server of the given concurrency serves them,
// from the first enqueue to the last completion.
func rawRound(ctx context.Context, rdb redis.UniversalClient, n, conc, p, round int) (float64, error) {
	q := fmt.Sprintf("benchraw%d-%d", round, time.Now().UnixNano())
	client := asynq.NewClientFromRedisClient(rdb)
	var done atomic.Int64
	all := make(chan struct{})
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: conc, Queues: map[string]int{q: 1}, LogLevel: asynq.ErrorLevel, TaskCheckInterval: 100 * time.Millisecond})
	mux := asynq.NewServeMux()
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		if done.Add(1) == int64(n) {
			close(all)
		}
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return 0, err
	}
	defer srv.Shutdown()
	start := time.Now()
	err := benchenv.Produce(n, p, func(int) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("noop", nil), asynq.Queue(q))
		return err
	})
	if err != nil {
		return 0, err
	}
	<-all
	return float64(n) / time.Since(start).Seconds(), nil
}

// spoolRound starts n single-turn threads and times a worker running them;
// the round's project is written under dir.
func spoolRound(ctx context.Context, rdb redis.UniversalClient, store blobstore.Store, dir string, n, conc, p, round int) (float64, error) {
	f, err := benchenv.NewFleet(ctx, rdb, store, benchenv.FleetConfig{
		Namespace: fmt.Sprintf("bench%d-%d", round, time.Now().UnixNano()), Dir: dir, Concurrency: conc,
		Files:      map[string]string{".ai/directives/bench/one.md": benchenv.Directive("one", `turns="2"`)},
		ScriptPath: "scripts/bench.yaml", Script: benchScript,
	})
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// The round's namespace is new: every end event on it is one of this
	// round's threads.
	sub, err := f.O.Subscribe(ctx)
	if err != nil {
		return 0, err
	}
	defer sub.Close()
	start := time.Now()
	ids, err := f.StartThreads(ctx, "bench/one", n, p)
	if err != nil {
		return 0, err
	}
	elapsed := time.Duration(0)
	if until == "ended" {
		if err := waitEnded(ctx, sub, n, 10*time.Minute); err != nil {
			return 0, err
		}
		elapsed = time.Since(start)
	}
	res, err := f.O.Wait(ctx, ids, 10*time.Minute)
	if err != nil {
		return 0, err
	}
	if elapsed == 0 {
		elapsed = time.Since(start)
	}
	for _, id := range ids {
		if res[id].Status != "completed" {
			return 0, fmt.Errorf("thread %s ended %s: %+v", id, res[id].Status, res[id].Error)
		}
	}
	return float64(n) / elapsed.Seconds(), nil
}

// waitEnded waits for n threads' end events (a terminal status published
// by the registry), each thread counted once.
func waitEnded(ctx context.Context, sub *registry.Subscription, n int, timeout time.Duration) error {
	ended := make(map[string]bool, n)
	deadline := time.After(timeout)
	for len(ended) < n {
		select {
		case ev, ok := <-sub.C:
			if !ok {
				return fmt.Errorf("event subscription closed after %d of %d ends", len(ended), n)
			}
			if thread.Status(ev.Status).Terminal() {
				ended[ev.ThreadID] = true
			}
		case <-deadline:
			return fmt.Errorf("%d of %d threads ended in %s", len(ended), n, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

const benchScript = `context_window: 200000
price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
latency: 0ms
directives:
  "bench/one":
    - text: "done"
      usage: {input: 100, output: 10}
`
