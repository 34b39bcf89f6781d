package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/spool-run/spool/bench/internal/benchenv"
)

// The throughput arms.
const (
	armOff  = "off"
	armOn   = "on"
	armKeys = "on+keys"
)

var arms = []string{armOff, armOn, armKeys}

// benchTenants are the tenants the throughput arms start runs for, in
// turn; calls are counted in the first's slot.
var benchTenants = []string{"t0", "t1", "t2", "t3"}

// workload is a kind of thread the arms start.
type workload struct {
	name      string
	directive string
	n         int
	spec      fleetSpec
}

// workloads are the single-turn and three-turn threads of o.
func workloads(o options) []workload {
	one := workload{name: "single-turn", directive: "bench/one", n: o.threads, spec: fleetSpec{
		files:  map[string]string{".ai/directives/bench/one.md": benchenv.Directive("one", `turns="2"`)},
		script: modelScript(o.latency, map[string]string{"bench/one": benchenv.FileTurns(1)}), conc: o.conc,
	}}
	three := workload{name: "three-turn", directive: "bench/three", n: o.multi, spec: fleetSpec{
		files:  map[string]string{".ai/directives/bench/three.md": benchenv.Directive("three", `turns="5"`)},
		script: modelScript(o.latency, map[string]string{"bench/three": benchenv.FileTurns(3)}), conc: o.conc,
	}}
	if o.multi == 0 {
		return []workload{one}
	}
	return []workload{one, three}
}

// modelScript is the scripted model's script: each directive's turns,
// every call taking latency.
func modelScript(latency time.Duration, turns map[string]string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "context_window: 200000\nprice: {input_per_mtok: 1.00, output_per_mtok: 5.00}\nlatency: %s\ndirectives:\n", latency)
	for name, t := range turns {
		fmt.Fprintf(&b, "  %q:\n%s", name, t)
	}
	return b.String()
}

// onPolicies are the "on" arms' policies for a capacity of conc (-policy):
// full is four tenants, one rule matching every run whose max is far
// above the capacity and every ceiling far away: it admits everything;
// rule leaves the ceilings out, tenants the rule as well, to tell what
// each part costs.
var onPolicies = map[string]func(conc int) string{
	"full": func(conc int) string {
		return onTenants + `tenant_defaults:
  max_running: 1000000
  spend_per_day: 1000000
  spend_per_month: 10000000
  starts_per_minute: 100000000
  runs_in_flight: 1000000
` + onRule(conc)
	},
	"rule":    func(conc int) string { return onTenants + onRule(conc) },
	"tenants": func(int) string { return onTenants },
}

const onTenants = "version: 1\ntenants: {t0: {}, t1: {}, t2: {}, t3: {}}\n"

func onRule(conc int) string {
	return fmt.Sprintf("concurrency:\n  - {name: every_run, directives: [\"*\"], key: \"${name}\", max: %d}\n", min(100*conc, 100000))
}

// measure is one arm's figures in one round.
type measure struct {
	perSec        float64 // threads per second
	cpu, scripts  float64 // Redis CPU and its scripts' time, µs per thread
	self          float64 // this process's CPU (worker, producers, waiter), µs per thread
	p50, p99      time.Duration
	tenantCallsPS float64 // t0's script calls per second in its slot
	stats         map[string]benchenv.CommandStat
}

// row is one topology, workload and arm over the rounds.
type row struct {
	topo, workload, arm string
	rounds              []measure
}

func (r *row) med(f func(measure) float64) float64 {
	xs := make([]float64, len(r.rounds))
	for i, m := range r.rounds {
		xs[i] = f(m)
	}
	return median(xs)
}

// throughput runs every workload's arms on topo, o.rounds rounds each,
// after a warm-up round of every arm that is not counted.
func throughput(ctx context.Context, o options, topo string) ([]*row, error) {
	e, stop, err := openEnv(o, topo)
	if err != nil {
		return nil, err
	}
	defer stop()
	idle, err := e.idleCPU(ctx, time.Second)
	if err != nil {
		return nil, err
	}
	fmt.Printf("%s: Redis uses %.1f ms of CPU per second idle (no fleet; every master): part of each row's Redis CPU per thread, more of a slower row's\n",
		topo, float64(idle.Microseconds())/1000)
	var out []*row
	for _, w := range workloads(o) {
		rows := map[string]*row{}
		for _, a := range arms {
			rows[a] = &row{topo: topo, workload: w.name, arm: a}
			out = append(out, rows[a])
		}
		warm := w
		warm.n = min(w.n, 500)
		for _, a := range arms {
			if _, err := e.round(ctx, o, warm, a, ""); err != nil {
				return nil, fmt.Errorf("%s warm-up %s: %w", w.name, a, err)
			}
		}
		for r := range o.rounds {
			for i := range arms {
				a := arms[(r+i)%len(arms)]
				prof := ""
				if o.cpuprofile != "" {
					prof = fmt.Sprintf("%s-%s-%s-%s-%d.pprof", o.cpuprofile, topo, w.name, strings.ReplaceAll(a, "+", "-"), r+1)
				}
				m, err := e.round(ctx, o, w, a, prof)
				if err != nil {
					return nil, fmt.Errorf("%s round %d %s: %w", w.name, r+1, a, err)
				}
				fmt.Printf("  %s %s round %d %-7s %6.0f threads/s, Redis %5.0f µs CPU %5.0f µs in scripts, process %5.0f µs CPU per thread, start p50 %s p99 %s ms, t0 %5.0f calls/s\n",
					topo, w.name, r+1, a, m.perSec, m.cpu, m.scripts, m.self, ms(m.p50), ms(m.p99), m.tenantCallsPS)
				printCommands(m.stats, o.commands, w.n)
				rows[a].rounds = append(rows[a].rounds, m)
			}
		}
	}
	return out, nil
}

// round runs w's threads once under arm on a fleet of its own and
// measures it; prof, if not "", is where the process's CPU profile of
// the round goes.
func (e *env) round(ctx context.Context, o options, w workload, arm, prof string) (measure, error) {
	spec := w.spec
	if arm != armOff {
		spec.policy = onPolicies[o.policy](spec.conc)
	}
	f, err := e.fleet(ctx, spec)
	if err != nil {
		return measure{}, err
	}
	defer f.Close()
	starts := make([]start, w.n)
	for i := range starts {
		starts[i].tenant = benchTenants[i%len(benchTenants)]
		if arm == armKeys {
			starts[i].key = fmt.Sprintf("bench-%d", i)
		}
	}
	if err := e.resetStats(ctx); err != nil {
		return measure{}, err
	}
	r0, err := e.sample(ctx)
	if err != nil {
		return measure{}, err
	}
	s0 := benchenv.SampleCPU(ctx, e.rdb).Self
	stopProf, err := profile(prof)
	if err != nil {
		return measure{}, err
	}
	e.calls.watch(f.O.Admission().Keys(), benchTenants[0])
	begin := time.Now()
	ids, err := startAll(ctx, f, w.directive, starts, o.producers)
	if err != nil {
		stopProf()
		return measure{}, err
	}
	sp, err := spans(ctx, f, ids, starts, 30*time.Minute)
	stopProf()
	if err != nil {
		return measure{}, err
	}
	calls := e.calls.n.Load()
	s1 := benchenv.SampleCPU(ctx, e.rdb).Self
	r1, err := e.sample(ctx)
	if err != nil {
		return measure{}, err
	}
	end, waits := begin, make([]time.Duration, len(sp))
	for i, s := range sp {
		if s.Ended.After(end) {
			end = s.Ended
		}
		waits[i] = s.wait()
	}
	secs := end.Sub(begin).Seconds()
	n := float64(w.n)
	return measure{
		perSec: n / secs,
		cpu:    float64((r1.cpu - r0.cpu).Microseconds()) / n, scripts: float64(r1.scripts.Microseconds()) / n,
		self: float64((s1 - s0).Microseconds()) / n,
		p50:  percentile(waits, 50), p99: percentile(waits, 99),
		tenantCallsPS: float64(calls) / secs, stats: r1.stats,
	}, nil
}

// printCommands prints the top busiest commands of stats, calls and µs
// per thread of n.
func printCommands(stats map[string]benchenv.CommandStat, top, n int) {
	if top <= 0 {
		return
	}
	all := make([]benchenv.CommandStat, 0, len(stats))
	for _, s := range stats {
		all = append(all, s)
	}
	sort.Slice(all, func(i, j int) bool { return all[i].Usec > all[j].Usec })
	var b strings.Builder
	for i, s := range all {
		if i == top {
			break
		}
		fmt.Fprintf(&b, " %s %.2f/%.1fµs", s.Name, float64(s.Calls)/float64(n), float64(s.Usec)/float64(n))
	}
	fmt.Printf("    busiest (calls/µs per thread):%s\n", b.String())
}

// profile starts a CPU profile into path ("": none); the func stops it.
func profile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); _ = f.Close() }, nil
}

// printThroughput prints the rows' medians, each arm's ratio to off in
// threads/s (of the medians, then round by round), and whether "on" met
// 0.90 of off.
func printThroughput(w io.Writer, rows []*row) {
	fmt.Fprintln(w, "\nthroughput (medians of the rounds; ratio = arm / off in threads/s, of the medians, then per round):")
	t := newTable("topology", "workload", "arm", ">threads/s", ">ratio", "per round", ">Redis CPU µs/thread",
		">Redis scripts µs/thread", ">process CPU µs/thread", ">start p50 ms", ">start p99 ms", ">t0 calls/s")
	var off *row
	for _, r := range rows {
		if r.arm == armOff {
			off = r
		}
		tps := r.med(func(m measure) float64 { return m.perSec })
		ratio, per := "", ""
		if r.arm != armOff && off != nil && off.topo == r.topo && off.workload == r.workload {
			ratio = fmt.Sprintf("%.2f", tps/off.med(func(m measure) float64 { return m.perSec }))
			var rs []string
			for i, m := range r.rounds {
				if i < len(off.rounds) {
					rs = append(rs, fmt.Sprintf("%.2f", m.perSec/off.rounds[i].perSec))
				}
			}
			per = strings.Join(rs, ", ")
		}
		t.add(r.topo, r.workload, r.arm, thousands(tps), ratio, per,
			fmt.Sprintf("%.0f", r.med(func(m measure) float64 { return m.cpu })),
			fmt.Sprintf("%.0f", r.med(func(m measure) float64 { return m.scripts })),
			fmt.Sprintf("%.0f", r.med(func(m measure) float64 { return m.self })),
			ms(time.Duration(r.med(func(m measure) float64 { return float64(m.p50) }))),
			ms(time.Duration(r.med(func(m measure) float64 { return float64(m.p99) }))),
			thousands(r.med(func(m measure) float64 { return m.tenantCallsPS })))
	}
	t.write(w)
}
