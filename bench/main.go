// Command bench measures spool end to end next to raw asynq, on the same
// Redis, in one run:
//
//   - raw: N no-op asynq tasks enqueued, then served by an asynq server of
//     the given concurrency; tasks per second from the first dequeue to the
//     last completion.
//   - spool: N single-turn threads (the scripted provider with zero
//     latency) started through the orchestrator and run by a spool worker
//     of the same concurrency: enqueue → claim → model call → checkpoint →
//     finalize (ledger release, registry, thread.json); threads per second
//     from the first start to the last finished thread.
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
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/stack"
	"github.com/spool-run/spool/transcript"
	"github.com/spool-run/spool/worker"
)

func main() {
	n := flag.Int("n", 1000, "tasks / threads per round")
	conc := flag.Int("concurrency", 8, "worker concurrency (both sides)")
	producers := flag.Int("producers", 4, "goroutines enqueueing (both sides)")
	rounds := flag.Int("rounds", 3, "rounds of each")
	redisURL := flag.String("redis", os.Getenv("SPOOL_BENCH_REDIS_URL"), "Redis URL (default: start redis-server)")
	withRaw := flag.Bool("raw", true, "run the raw asynq rounds (false: spool only, for profiling)")
	storeDir := flag.String("store", "", "local blob store directory (default: a temp dir; \"mem\": in memory, to separate storage cost)")
	flag.Parse()
	if err := run(*n, *conc, *producers, *rounds, *redisURL, *storeDir, *withRaw); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(n, conc, producers, rounds int, redisURL, storeDir string, withRaw bool) error {
	ctx := context.Background()
	tmp, err := os.MkdirTemp("", "spool-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	if redisURL == "" {
		bin, err := exec.LookPath("redis-server")
		if err != nil {
			return fmt.Errorf("no -redis and no redis-server on PATH")
		}
		port := 46379 + os.Getpid()%1000
		cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", tmp)
		if err := cmd.Start(); err != nil {
			return err
		}
		defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
		redisURL = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
		time.Sleep(300 * time.Millisecond)
	}
	rdb, err := stack.OpenRedis(redisURL)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		return err
	}
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
	project := filepath.Join(tmp, "project")
	if err := writeProject(project); err != nil {
		return err
	}
	fmt.Printf("bench: n=%d concurrency=%d producers=%d rounds=%d redis=%s store=%T\n", n, conc, producers, rounds, redisURL, store)
	var raws, spools []float64
	for r := 0; r < rounds; r++ {
		c0 := sampleCPU(ctx, rdb)
		raw := 1.0
		if withRaw {
			if raw, err = rawRound(ctx, rdb, n, conc, producers, r); err != nil {
				return err
			}
		}
		c1 := sampleCPU(ctx, rdb)
		sp, err := spoolRound(ctx, rdb, store, project, n, conc, producers, r)
		if err != nil {
			return err
		}
		c2 := sampleCPU(ctx, rdb)
		fmt.Printf("round %d: raw asynq %.0f tasks/s, spool %.0f threads/s, ratio %.2f; CPU per task/thread (bench process, redis): raw %s, spool %s\n",
			r+1, raw, sp, sp/raw, c1.sub(c0).per(n), c2.sub(c1).per(n))
		raws, spools = append(raws, raw), append(spools, sp)
	}
	mr, ms := median(raws), median(spools)
	fmt.Printf("median: raw asynq %.0f tasks/s, spool %.0f threads/s, ratio %.2f\n", mr, ms, ms/mr)
	return nil
}

// cpuSample is the CPU time used so far by this process and by the Redis
// server.
type cpuSample struct{ self, redis time.Duration }

func sampleCPU(ctx context.Context, rdb redis.UniversalClient) cpuSample {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	self := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	var red time.Duration
	info, _ := rdb.Info(ctx, "cpu").Result()
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			red += time.Duration(f * float64(time.Second))
		}
	}
	return cpuSample{self, red}
}

func (c cpuSample) sub(o cpuSample) cpuSample { return cpuSample{c.self - o.self, c.redis - o.redis} }

func (c cpuSample) per(n int) string {
	return fmt.Sprintf("%d µs + %d µs", c.self.Microseconds()/int64(n), c.redis.Microseconds()/int64(n))
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// produce runs fn(i) for i in [0, n) on p goroutines and returns the first
// error.
func produce(n, p int, fn func(i int) error) error {
	var next atomic.Int64
	errc := make(chan error, p)
	for range p {
		go func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					errc <- nil
					return
				}
				if err := fn(i); err != nil {
					next.Store(int64(n))
					errc <- err
					return
				}
			}
		}()
	}
	var first error
	for range p {
		if err := <-errc; err != nil && first == nil {
			first = err
		}
	}
	return first
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
	err := produce(n, p, func(int) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("noop", nil), asynq.Queue(q))
		return err
	})
	if err != nil {
		return 0, err
	}
	<-all
	return float64(n) / time.Since(start).Seconds(), nil
}

// spoolRound starts n single-turn threads and times a worker running them.
func spoolRound(ctx context.Context, rdb redis.UniversalClient, store blobstore.Store, project string, n, conc, p, round int) (float64, error) {
	ns := fmt.Sprintf("bench%d-%d", round, time.Now().UnixNano())
	signer, err := transcript.GenerateKey()
	if err != nil {
		return 0, err
	}
	keyring := transcript.NewKeyring(signer.PublicKey())
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	client := asynq.NewClientFromRedisClient(rdb)
	o := orchestrator.New(orchestrator.Config{Namespace: ns, Logger: log}, rdb, store, &queue.Enqueuer{Client: client}, signer, keyring)
	digest, err := directive.BuildBundle(ctx, store, project, "", map[string][]byte{"scripts/bench.yaml": []byte(benchScript)})
	if err != nil {
		return 0, err
	}
	w := worker.New(worker.Config{Concurrency: conc, Queues: map[string]int{"default": 1}, Logger: log, RecoverInterval: -1}, o)
	ids := make([]string, n)
	if err := w.Start(); err != nil {
		return 0, err
	}
	defer w.Stop()
	start := time.Now()
	err = produce(n, p, func(i int) error {
		rec, err := o.Start(ctx, orchestrator.StartRequest{Directive: "bench/one", Bundle: digest, Model: "script:scripts/bench.yaml"})
		if err != nil {
			return err
		}
		ids[i] = rec.ThreadID
		return nil
	})
	if err != nil {
		return 0, err
	}
	res, err := o.Wait(ctx, ids, 10*time.Minute)
	if err != nil {
		return 0, err
	}
	elapsed := time.Since(start)
	for _, id := range ids {
		if res[id].Status != "completed" {
			return 0, fmt.Errorf("thread %s ended %s: %+v", id, res[id].Status, res[id].Error)
		}
	}
	return float64(n) / elapsed.Seconds(), nil
}

const benchScript = `context_window: 200000
price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
latency: 0ms
directives:
  "bench/one":
    - text: "done"
      usage: {input: 100, output: 10}
`

func writeProject(dir string) error {
	p := filepath.Join(dir, ".ai", "directives", "bench", "one.md")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte("# One turn\n\n```xml\n<directive name=\"one\" version=\"1.0.0\">\n  <metadata>\n    <description>one turn</description>\n    <limits turns=\"2\" />\n    <permissions><execute><tool>rye/file-system/*</tool></execute></permissions>\n  </metadata>\n</directive>\n```\n"), 0o644)
}
