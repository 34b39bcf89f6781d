// Command graph measures graph runs next to threads, side by side on one
// Redis, in one run:
//
//   - foreach: one graph run whose parallel foreach starts N scripted
//     single-turn children with max_concurrency C, against the same N
//     threads started directly (producers goroutines, as `thread run`
//     would: all queued at once), and against the same N threads started
//     by a client that keeps C of them running (C goroutines, each
//     starting a thread and waiting for it: the cap the foreach keeps),
//     each on an in-process worker of the same concurrency; items
//     (threads) per second from the start to the last end, and the CPU
//     of this process and of Redis per item.
//   - loop: one graph run of a gate loop of S steps, against one thread
//     of S turns (a file tool call each, the scripted model with zero
//     latency); the time and the CPU per step and per turn.
//
// Rounds alternate the two sides; medians and ratios are printed.
//
//	go run ./bench/graph -n 1000 -cap 50 -concurrency 50 -steps 200 -rounds 3
//
// With no -redis it starts a redis-server from PATH on a free port; the
// blob store is a local directory in a temp dir.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/bench/internal/benchenv"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

func main() {
	n := flag.Int("n", 1000, "foreach items, and threads started directly")
	capN := flag.Int("cap", 50, "the foreach's max_concurrency")
	conc := flag.Int("concurrency", 50, "worker concurrency (both sides)")
	producers := flag.Int("producers", 4, "goroutines starting the direct threads")
	steps := flag.Int("steps", 200, "gate loop steps, and the thread's turns")
	rounds := flag.Int("rounds", 3, "rounds of each")
	only := flag.String("only", "", "foreach or loop: run one comparison")
	check := flag.Duration("task-check", 0, "the worker's TaskCheckInterval (0: its default)")
	redisURL := benchenv.RedisFlag()
	flag.Parse()
	if err := run(*n, *capN, *conc, *producers, *steps, *rounds, *only, *redisURL, *check); err != nil {
		fmt.Fprintln(os.Stderr, "bench graph:", err)
		os.Exit(1)
	}
}

const script = `context_window: 200000
price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
latency: 0ms
directives:
  "bench/one":
    - text: "done"
      usage: {input: 100, output: 10}
  "bench/long":
%s`

// files is the bench project; hold is its graphs.yaml ("" for none: the
// default hold).
func files(n, capN, steps int, hold string) map[string]string {
	one := "# one\n\n```xml\n<directive name=\"one\" version=\"1.0.0\">\n  <metadata>\n    <description>one</description>\n" +
		"    <model tier=\"bench\" />\n    <limits turns=\"2\" spend=\"0.01\" />\n  </metadata>\n</directive>\n```\n"
	fs := map[string]string{
		".ai/config/agent/models.yaml": "tiers:\n  bench: script:scripts/bench.yaml\n",
		".ai/directives/bench/one.md":  one,
		".ai/directives/bench/long.md": benchenv.Directive("long", fmt.Sprintf(`turns="%d" spend="10" tokens="100000000" duration="3600"`, steps+5)),
		".ai/graphs/bench/fan.yaml": fmt.Sprintf(`version: "1"
description: a parallel foreach of single-turn children
permissions: [rye.execute.directive.bench.*]
limits: {spend: 100, spawns: %d, duration: 3600}
inputs: {type: object, properties: {items: {type: array}}}
config:
  start: fan
  nodes:
    fan:
      type: foreach
      over: "${inputs.items}"
      parallel: true
      max_concurrency: %d
      max_items: %d
      action: {directive: bench/one, inputs: {}}
      assign: {done: "${result.succeeded}"}
      next: out
    out:
      type: return
      output: {done: "${state.done}"}
`, n+10, capN, n),
		".ai/graphs/bench/loop.yaml": fmt.Sprintf(`version: "1"
description: a gate loop
permissions: [rye.execute.tool.rye.file-system.*]
limits: {max_steps: %d, duration: 3600}
config:
  start: spin
  nodes:
    spin:
      type: gate
      next:
        - when: {path: run.step, op: gte, value: %d}
          to: out
        - to: spin
    out:
      type: return
      output: {steps: "${run.step}"}
`, steps+5, steps),
	}
	if hold != "" {
		fs[".ai/config/agent/graphs.yaml"] = hold
	}
	return fs
}

// noHold is a graphs.yaml whose runs suspend as soon as their children
// all run: the foreach without the hold, for its figure beside.
const noHold = "graph:\n  hold_seconds: 0\n"

func run(n, capN, conc, producers, steps, rounds int, only, redisURL string, check time.Duration) error {
	ctx := context.Background()
	rdb, tmp, stop, err := benchenv.Scratch("spool-bench-graph-", redisURL)
	if err != nil {
		return err
	}
	defer stop()
	store, err := blobstore.NewLocal(filepath.Join(tmp, "blobs"))
	if err != nil {
		return err
	}
	if prof := os.Getenv("SPOOL_BENCH_CPUPROFILE"); prof != "" {
		f, err := os.Create(prof)
		if err != nil {
			return err
		}
		_ = pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	fmt.Printf("bench graph: n=%d cap=%d concurrency=%d producers=%d steps=%d rounds=%d\n", n, capN, conc, producers, steps, rounds)
	b := &graphBench{n: n, capN: capN, conc: conc, producers: producers, steps: steps, check: check, rdb: rdb, store: store, tmp: tmp}
	var fig figures
	for r := 0; r < rounds; r++ {
		if err := b.round(ctx, r, only, &fig); err != nil {
			return err
		}
	}
	fig.printMedians(capN)
	return nil
}

// graphBench is what every round of the bench uses: its parameters, and
// the Redis, the blob store and the directory its fleets share.
type graphBench struct {
	n, capN, conc, producers, steps int
	check                           time.Duration
	rdb                             redis.UniversalClient
	store                           blobstore.Store
	tmp                             string
}

// figures are the rounds' figures, for their medians: items (threads) per
// second of the foreach graph, of the threads started directly, of the
// threads capN at a time and of the graph without the hold; nanoseconds
// per graph step and per thread turn of the loop.
type figures struct {
	graph, threads, window, suspended []float64
	graphStep, threadTurn             []float64
}

// round runs round r on a fleet of its own: the foreach comparison unless
// only is "loop", the loop comparison unless only is "foreach".
func (b *graphBench) round(ctx context.Context, r int, only string, fig *figures) error {
	f, err := benchenv.NewFleet(ctx, b.rdb, b.store, fleetConfig(b.tmp, "round", r, b.conc, b.check, b.n, b.capN, b.steps, ""))
	if err != nil {
		return err
	}
	defer f.Close()
	if only != "loop" {
		if err := b.foreach(ctx, r, f, fig); err != nil {
			return err
		}
	}
	if only != "foreach" {
		return b.loop(ctx, r, f, fig)
	}
	return nil
}

// foreach runs round r's foreach comparison on f: the graph, then (unless
// SPOOL_BENCH_GRAPH_ONLY is set) the threads started directly, the
// threads capN at a time and the graph on a fleet without the hold; it
// prints the round's line and adds its figures to fig.
func (b *graphBench) foreach(ctx context.Context, r int, f *benchenv.Fleet, fig *figures) error {
	n, capN := b.n, b.capN
	items := make([]any, n)
	for i := range items {
		items[i] = i
	}
	g, gc, err := timeGraph(ctx, b.rdb, f, "bench/fan", map[string]any{"items": items})
	if err != nil {
		return err
	}
	t, tc := time.Duration(1), benchenv.CPU{}
	w, wc := time.Duration(1), benchenv.CPU{}
	su, sc := time.Duration(1), benchenv.CPU{}
	if os.Getenv("SPOOL_BENCH_GRAPH_ONLY") == "" {
		if t, tc, err = timeThreads(ctx, b.rdb, f, n, b.producers); err != nil {
			return err
		}
		if w, wc, err = timeWindow(ctx, b.rdb, f, n, capN); err != nil {
			return err
		}
		// The same graph on a fleet whose runs do not hold (hold_seconds 0).
		if su, sc, err = timeSuspended(ctx, b.rdb, b.store, b.tmp, r, b.conc, b.check, n, capN, b.steps, items); err != nil {
			return err
		}
	}
	fmt.Printf("round %d foreach: graph %.0f items/s, threads %.0f threads/s (ratio %.2f), threads %d at a time %.0f threads/s (ratio %.2f), graph without the hold %.0f items/s (held/suspended %.2f); CPU per item (bench, redis): graph %s, threads %s, %d at a time %s, without the hold %s\n",
		r+1, float64(n)/g.Seconds(), float64(n)/t.Seconds(), t.Seconds()/g.Seconds(), capN, float64(n)/w.Seconds(), w.Seconds()/g.Seconds(),
		float64(n)/su.Seconds(), su.Seconds()/g.Seconds(), gc.Per(n), tc.Per(n), capN, wc.Per(n), sc.Per(n))
	fig.graph, fig.threads = append(fig.graph, float64(n)/g.Seconds()), append(fig.threads, float64(n)/t.Seconds())
	fig.window, fig.suspended = append(fig.window, float64(n)/w.Seconds()), append(fig.suspended, float64(n)/su.Seconds())
	return nil
}

// loop runs round r's loop comparison on f: the gate loop graph, then the
// thread of as many turns; it prints the round's line and adds its
// figures to fig.
func (b *graphBench) loop(ctx context.Context, r int, f *benchenv.Fleet, fig *figures) error {
	steps := b.steps
	g, gc, err := timeGraph(ctx, b.rdb, f, "bench/loop", nil)
	if err != nil {
		return err
	}
	t, tc, err := timeTurns(ctx, b.rdb, f)
	if err != nil {
		return err
	}
	fmt.Printf("round %d loop: graph %s per step, thread %s per turn, ratio %.2f; CPU per step / turn (bench, redis): %s / %s\n",
		r+1, g/time.Duration(steps+1), t/time.Duration(steps), float64(g)/float64(steps+1)/(float64(t)/float64(steps)), gc.Per(steps+1), tc.Per(steps))
	fig.graphStep, fig.threadTurn = append(fig.graphStep, float64(g)/float64(steps+1)), append(fig.threadTurn, float64(t)/float64(steps))
	return nil
}

// printMedians prints the median lines of the comparisons that ran.
func (fig *figures) printMedians(capN int) {
	if len(fig.graph) > 0 {
		mg, mt, mw, ms := benchenv.Median(fig.graph), benchenv.Median(fig.threads), benchenv.Median(fig.window), benchenv.Median(fig.suspended)
		fmt.Printf("median foreach: graph %.0f items/s, threads %.0f threads/s (ratio %.2f), threads %d at a time %.0f threads/s (ratio %.2f), graph without the hold %.0f items/s (held/suspended %.2f)\n",
			mg, mt, mg/mt, capN, mw, mg/mw, ms, mg/ms)
	}
	if len(fig.graphStep) > 0 {
		mg, mt := benchenv.Median(fig.graphStep), benchenv.Median(fig.threadTurn)
		fmt.Printf("median loop: %s per graph step, %s per thread turn, ratio %.2f\n", time.Duration(mg), time.Duration(mt), mg/mt)
	}
}

// fleetConfig is round r's fleet of the bench project with graphs.yaml
// hold (files), in a namespace and directory of its own named by kind.
func fleetConfig(tmp, kind string, r, conc int, check time.Duration, n, capN, steps int, hold string) benchenv.FleetConfig {
	return benchenv.FleetConfig{
		Namespace: fmt.Sprintf("benchgraph-%s%d-%d", kind, r, time.Now().UnixNano()), Dir: filepath.Join(tmp, fmt.Sprint(kind, r)),
		Concurrency: conc, TaskCheckInterval: check,
		Files: files(n, capN, steps, hold), ScriptPath: "scripts/bench.yaml", Script: fmt.Sprintf(script, benchenv.FileTurns(steps)),
	}
}

// timeSuspended runs the foreach graph on a fleet of its own whose runs
// suspend as soon as their children all run (hold_seconds 0).
func timeSuspended(ctx context.Context, rdb redis.UniversalClient, store blobstore.Store, tmp string, r, conc int, check time.Duration,
	n, capN, steps int, items []any) (time.Duration, benchenv.CPU, error) {
	f, err := benchenv.NewFleet(ctx, rdb, store, fleetConfig(tmp, "suspended", r, conc, check, n, capN, steps, noHold))
	if err != nil {
		return 0, benchenv.CPU{}, err
	}
	defer f.Close()
	return timeGraph(ctx, rdb, f, "bench/fan", map[string]any{"items": items})
}

// timeGraph runs one graph run to its end.
func timeGraph(ctx context.Context, rdb redis.UniversalClient, f *benchenv.Fleet, name string, inputs map[string]any) (time.Duration, benchenv.CPU, error) {
	c0 := benchenv.SampleCPU(ctx, rdb)
	start := time.Now()
	rec, err := f.O.Start(ctx, orchestrator.StartRequest{Graph: true, Directive: name, Bundle: f.Bundle, Inputs: inputs})
	if err != nil {
		return 0, benchenv.CPU{}, err
	}
	res, err := f.O.Wait(ctx, []string{rec.ThreadID}, 30*time.Minute)
	if err != nil {
		return 0, benchenv.CPU{}, err
	}
	d := time.Since(start)
	got := res[rec.ThreadID]
	if got.Status != thread.StatusCompleted {
		return 0, benchenv.CPU{}, fmt.Errorf("run %s ended %s: %+v", rec.ThreadID, got.Status, got.Error)
	}
	if os.Getenv("SPOOL_BENCH_VERBOSE") != "" {
		fmt.Printf("  %s: %d activations, %d segments, %d steps\n", name, got.Activation, got.Transcript.Segments, got.Step)
		kids, _ := f.O.Children(ctx, rec.ThreadID)
		lifetimes(kids)
	}
	return d, benchenv.SampleCPU(ctx, rdb).Sub(c0), nil
}

// timeThreads starts n threads directly and waits for them.
func timeThreads(ctx context.Context, rdb redis.UniversalClient, f *benchenv.Fleet, n, producers int) (time.Duration, benchenv.CPU, error) {
	c0 := benchenv.SampleCPU(ctx, rdb)
	start := time.Now()
	ids, err := f.StartThreads(ctx, "bench/one", n, producers)
	if err != nil {
		return 0, benchenv.CPU{}, err
	}
	res, err := f.O.Wait(ctx, ids, 30*time.Minute)
	if err != nil {
		return 0, benchenv.CPU{}, err
	}
	d := time.Since(start)
	if os.Getenv("SPOOL_BENCH_VERBOSE") != "" {
		var recs []*registry.Record
		for _, id := range ids {
			recs = append(recs, res[id])
		}
		lifetimes(recs)
	}
	for _, id := range ids {
		if res[id].Status != thread.StatusCompleted {
			return 0, benchenv.CPU{}, fmt.Errorf("thread %s ended %s", id, res[id].Status)
		}
	}
	return d, benchenv.SampleCPU(ctx, rdb).Sub(c0), nil
}

// timeTurns runs one thread of many turns.
func timeTurns(ctx context.Context, rdb redis.UniversalClient, f *benchenv.Fleet) (time.Duration, benchenv.CPU, error) {
	c0 := benchenv.SampleCPU(ctx, rdb)
	start := time.Now()
	rec, err := f.O.Start(ctx, orchestrator.StartRequest{Directive: "bench/long", Bundle: f.Bundle, Model: f.Model})
	if err != nil {
		return 0, benchenv.CPU{}, err
	}
	res, err := f.O.Wait(ctx, []string{rec.ThreadID}, 30*time.Minute)
	if err != nil {
		return 0, benchenv.CPU{}, err
	}
	d := time.Since(start)
	if got := res[rec.ThreadID]; got.Status != thread.StatusCompleted {
		return 0, benchenv.CPU{}, fmt.Errorf("thread %s ended %s: %+v", rec.ThreadID, got.Status, got.Error)
	}
	return d, benchenv.SampleCPU(ctx, rdb).Sub(c0), nil
}

// lifetimes prints the mean queue wait (created → first claim) and run
// time (first claim → end) of recs.
func lifetimes(recs []*registry.Record) {
	var wait, run time.Duration
	for _, r := range recs {
		wait += r.StartedAt.Sub(r.CreatedAt)
		run += r.UpdatedAt.Sub(r.StartedAt)
	}
	if n := time.Duration(len(recs)); n > 0 {
		fmt.Printf("  %d threads: mean queue wait %s, mean run %s\n", n, wait/n, run/n)
	}
}

// timeWindow runs n threads through a client that keeps capN running:
// capN goroutines, each starting a thread and waiting for its end.
func timeWindow(ctx context.Context, rdb redis.UniversalClient, f *benchenv.Fleet, n, capN int) (time.Duration, benchenv.CPU, error) {
	c0 := benchenv.SampleCPU(ctx, rdb)
	start := time.Now()
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	errs := make(chan error, capN)
	var mu sync.Mutex
	var recs []*registry.Record
	for g := 0; g < capN; g++ {
		go func() {
			for range next {
				rec, err := f.O.Start(ctx, orchestrator.StartRequest{Directive: "bench/one", Bundle: f.Bundle, Model: f.Model})
				if err != nil {
					errs <- err
					return
				}
				res, err := f.O.Wait(ctx, []string{rec.ThreadID}, 10*time.Minute)
				if err != nil {
					errs <- err
					return
				}
				if st := res[rec.ThreadID].Status; st != thread.StatusCompleted {
					errs <- fmt.Errorf("thread %s ended %s", rec.ThreadID, st)
					return
				}
				mu.Lock()
				recs = append(recs, res[rec.ThreadID])
				mu.Unlock()
			}
			errs <- nil
		}()
	}
	for g := 0; g < capN; g++ {
		if err := <-errs; err != nil {
			return 0, benchenv.CPU{}, err
		}
	}
	d := time.Since(start)
	if os.Getenv("SPOOL_BENCH_VERBOSE") != "" {
		lifetimes(recs)
	}
	return d, benchenv.SampleCPU(ctx, rdb).Sub(c0), nil
}
