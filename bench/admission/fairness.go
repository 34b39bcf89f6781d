package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/spool-run/spool/bench/internal/benchenv"
)

// fairness runs the fairness and priority rows on a redis-server of
// their own and prints them.
func fairness(ctx context.Context, o options) error {
	if o.fairConc < 1 || o.backlog < 1 || o.newcomers < 1 || o.prioBacklog < 1 || o.activation <= 0 || o.prioActivation <= 0 {
		return fmt.Errorf("the fairness rows need -fair-concurrency, -backlog, -newcomers and -prio-backlog of at least 1 and positive activations")
	}
	e, stop, err := openEnv(o, "standalone")
	if err != nil {
		return err
	}
	defer stop()
	turn := o.activation / time.Duration(o.fairConc)
	fmt.Printf("\nfairness: standalone, one worker of %d slots, activations of %s on average (one model call of 0.7, 0.9, 1.1 or 1.3 times it, in turn), slot turnover %s\n",
		o.fairConc, o.activation, turn)
	byArm := map[string]newcomerResult{}
	for _, a := range []string{armOff, armOn} {
		r, err := e.newcomer(ctx, o, a == armOn)
		if err != nil {
			return fmt.Errorf("newcomer %s: %w", a, err)
		}
		byArm[a] = r
	}
	printNewcomer(o, byArm)
	fmt.Printf("\nJain's index over slot-seconds/weight, 5 s windows while both tenants stay backlogged (about %s of work each):\n", o.jainFor)
	t := newTable("weights a:b", ">runs a / b", ">windows", ">Jain min", ">Jain median", ">slot-s a / b", ">target a / b")
	for _, w := range [][2]float64{{1, 1}, {3, 1}} {
		r, err := e.jainRow(ctx, o, w)
		if err != nil {
			return fmt.Errorf("jain %v: %w", w, err)
		}
		t.add(fmt.Sprintf("%g:%g", w[0], w[1]), fmt.Sprintf("%d / %d", r.runs[0], r.runs[1]), fmt.Sprint(len(r.Index)),
			fmt.Sprintf("%.3f", slices.Min(append([]float64{1}, r.Index...))), fmt.Sprintf("%.3f", median(r.Index)),
			fmt.Sprintf("%.2f", r.SlotSeconds["a"]/math.Max(r.SlotSeconds["b"], 1e-9)), fmt.Sprintf("%.2f", w[0]/w[1]))
	}
	t.write(os.Stdout)
	return e.priorityRows(ctx, o)
}

// priorityRows runs and prints the priority rows, admission off and on.
func (e *env) priorityRows(ctx context.Context, o options) error {
	fmt.Printf("\npriority: a priority-1 run started behind %d priority-3 runs of its tenant (%d slots, activations of %s):\n",
		o.prioBacklog, o.fairConc, o.prioActivation)
	t := newTable("admission", ">priority-3 starts between its request and its start", ">priority-3 grants between its request and its grant",
		">its start latency ms", ">priority-3 runs still waiting then")
	for _, a := range []string{armOff, armOn} {
		r, err := e.priority(ctx, o, a == armOn)
		if err != nil {
			return fmt.Errorf("priority %s: %w", a, err)
		}
		granted := fmt.Sprint(r.granted)
		switch {
		case a == armOff:
			granted = "(no grants)"
		case r.granted < 0:
			granted = "(its grant not seen)"
		}
		t.add(a, fmt.Sprint(r.between), granted, ms(r.wait), fmt.Sprint(r.after))
	}
	t.write(os.Stdout)
	return nil
}

// fairSpec is a fleet of slots conc running "fair/run", one model call of
// latency; policy "" leaves admission off.
func fairSpec(conc int, latency time.Duration, policy string) fleetSpec {
	spec := fleetSpec{
		files:  map[string]string{".ai/directives/fair/run.md": benchenv.Directive("run", `turns="2"`)},
		script: modelScript(latency, map[string]string{"fair/run": benchenv.FileTurns(1)}), conc: conc, policy: policy,
		more: map[string]string{},
	}
	for i, x := range staggers {
		spec.more[staggerPath(i)] = modelScript(time.Duration(float64(latency)*x), map[string]string{"fair/run": benchenv.FileTurns(1)})
	}
	return spec
}

// staggers are the lengths, as parts of the activation length, that
// staggered runs take in turn (their mean is 1): runs that all took the
// same time would start and end in lockstep, a whole capacity of slots
// freeing at once, where a slot turnover supposes one at a time.
var staggers = []float64{0.7, 0.9, 1.1, 1.3}

func staggerPath(i int) string { return fmt.Sprintf("scripts/fair-%d.yaml", i) }

// staggered gives ss the staggered lengths in turn.
func staggered(ss []start) []start {
	for i := range ss {
		ss[i].model = "script:" + staggerPath(i%len(staggers))
	}
	return ss
}

// tenantsPolicy is a policy of the given tenants and weights, no rule.
func tenantsPolicy(weights map[string]float64) string {
	var b strings.Builder
	b.WriteString("version: 1\ntenants:\n")
	names := make([]string, 0, len(weights))
	for t := range weights {
		names = append(names, t)
	}
	sort.Strings(names)
	for _, t := range names {
		fmt.Fprintf(&b, "  %s: {weight: %g}\n", t, weights[t])
	}
	return b.String()
}

// runs is n starts for tenant at priority p.
func runs(tenant string, n, p int) []start {
	out := make([]start, n)
	for i := range out {
		out[i] = start{tenant: tenant, priority: p}
	}
	return out
}

// newcomerResult is the newcomer row of one arm: B's starts, in order,
// as time since B's first request, and A's median start latency.
type newcomerResult struct {
	b       []time.Duration
	grants  []time.Duration // with admission on: B's k-th grant since B's first request
	aMedian time.Duration
}

// newcomer queues o.backlog runs of tenant A, then, once A fills the
// fleet, o.newcomers runs of B at equal weights.
func (e *env) newcomer(ctx context.Context, o options, on bool) (newcomerResult, error) {
	policy := ""
	if on {
		policy = tenantsPolicy(map[string]float64{"a": 1, "b": 1})
	}
	f, err := e.fleet(ctx, fairSpec(o.fairConc, o.activation, policy))
	if err != nil {
		return newcomerResult{}, err
	}
	defer f.Close()
	as := staggered(runs("a", o.backlog, 0))
	aIDs, err := startAll(ctx, f, "fair/run", as, o.producers)
	if err != nil {
		return newcomerResult{}, err
	}
	time.Sleep(max(time.Second, 2*o.activation)) // A holds every slot, the balancer has seen it
	bs := staggered(runs("b", o.newcomers, 0))
	log := startGrantLog(ctx, e, f, "b", o.activation/20)
	bIDs, err := startAll(ctx, f, "fair/run", bs, o.producers)
	if err != nil {
		_ = log.finish()
		return newcomerResult{}, err
	}
	timeout := 2*time.Duration(o.backlog+o.newcomers)*o.activation/time.Duration(o.fairConc) + time.Minute
	sp, err := spans(ctx, f, append(aIDs, bIDs...), append(as, bs...), timeout)
	if lerr := log.finish(); err == nil {
		err = lerr
	}
	if err != nil {
		return newcomerResult{}, err
	}
	var r newcomerResult
	if on {
		r.grants = log.sinceFirst(bIDs)
	}
	aw := make([]time.Duration, 0, o.backlog)
	for _, s := range sp[:o.backlog] {
		aw = append(aw, s.wait())
	}
	r.aMedian = percentile(aw, 50)
	b := sp[o.backlog:]
	first := b[0].Created
	for _, s := range b {
		if s.Created.Before(first) {
			first = s.Created
		}
	}
	for _, s := range b {
		r.b = append(r.b, s.Started.Sub(first))
	}
	slices.Sort(r.b)
	return r, nil
}

// printNewcomer prints B's k-th start in both arms, in ms and in slot
// turnovers, with admission's promise (k + 2 turnovers for k ≤ 8).
func printNewcomer(o options, byArm map[string]newcomerResult) {
	turn := o.activation / time.Duration(o.fairConc)
	fmt.Printf("\nnewcomer: tenant A's %d runs queued, then tenant B's %d, equal weights; B's k-th start since B's first request:\n", o.backlog, o.newcomers)
	t := newTable(">k", ">off ms", ">off turnovers", ">on ms", ">on turnovers", ">on: its grant, ms", ">bound (k + 2 turnovers)")
	off, on := byArm[armOff], byArm[armOn]
	for _, k := range []int{1, 2, 3, 4, 6, 8, 12, 16, 20} {
		if k > o.newcomers {
			break
		}
		bound := ""
		if k <= 8 {
			bound = fmt.Sprint(k + 2)
		}
		grant := "not seen"
		if k <= len(on.grants) {
			grant = ms(on.grants[k-1])
		}
		t.add(fmt.Sprint(k), ms(off.b[k-1]), fmt.Sprintf("%.1f", turns(off.b[k-1], turn)),
			ms(on.b[k-1]), fmt.Sprintf("%.1f", turns(on.b[k-1], turn)), grant, bound)
	}
	t.write(os.Stdout)
	for _, a := range []string{armOff, armOn} {
		r := byArm[a]
		within := 0
		for k, d := range r.b {
			if k < 8 && turns(d, turn) <= float64(k+3) {
				within++
			}
		}
		fmt.Printf("newcomer %s: all of B started within %.1f activation lengths; %d of B's first %d within k + 2 turnovers; A's median start latency %s ms (%.0f turnovers)\n",
			a, float64(r.b[len(r.b)-1])/float64(o.activation), within, min(8, len(r.b)), ms(r.aMedian), turns(r.aMedian, turn))
	}
}

// turns is d in slot turnovers of turn.
func turns(d, turn time.Duration) float64 { return float64(d) / float64(turn) }

// jainResult is a Jain row: the runs started per tenant and the windows.
type jainResult struct {
	fairWindows
	runs [2]int
}

// jainRow keeps tenants a and b of weights w backlogged for about
// o.jainFor (each tenant's runs its share of the capacity for that
// long, plus a fifth) and measures their slot-seconds.
func (e *env) jainRow(ctx context.Context, o options, w [2]float64) (jainResult, error) {
	weights := map[string]float64{"a": w[0], "b": w[1]}
	f, err := e.fleet(ctx, fairSpec(o.fairConc, o.activation, tenantsPolicy(weights)))
	if err != nil {
		return jainResult{}, err
	}
	defer f.Close()
	var r jainResult
	slots := float64(o.fairConc) * o.jainFor.Seconds() / o.activation.Seconds() * 1.2
	for i, x := range w {
		r.runs[i] = int(math.Ceil(slots * x / (w[0] + w[1])))
	}
	// Interleaved, so that both tenants are backlogged from the start.
	var ss []start
	for i := 0; i < max(r.runs[0], r.runs[1]); i++ {
		if i < r.runs[0] {
			ss = append(ss, start{tenant: "a"})
		}
		if i < r.runs[1] {
			ss = append(ss, start{tenant: "b"})
		}
	}
	ids, err := startAll(ctx, f, "fair/run", staggered(ss), o.producers)
	if err != nil {
		return jainResult{}, err
	}
	sp, err := spans(ctx, f, ids, ss, 2*o.jainFor+time.Minute)
	if err != nil {
		return jainResult{}, err
	}
	r.fairWindows = jainWindows(sp, weights, 5*time.Second)
	return r, nil
}

// priorityResult is the priority row of one arm: how many priority-3
// runs started between the priority-1 run's request and its start; with
// admission on, how many it granted between the priority-1 run's request
// and its grant (a start may be of a grant made before; -1: the poll
// missed the priority-1 run's record); how long it
// waited, and how many priority-3 runs had not started when it did.
type priorityResult struct {
	between, granted, after int
	wait                    time.Duration
}

// grantLog polls a tenant's admission records while a row runs and keeps
// each activation's request and grant times (ms, the fleet's clock): a
// record lives from its request to its release, so a poll more often
// than an activation lasts sees every grant.
type grantLog struct {
	mu     sync.Mutex
	rq, ga map[string]int64
	stop   chan struct{}
	done   chan struct{}
	err    error
	key    string
}

func startGrantLog(ctx context.Context, e *env, f *benchenv.Fleet, tenant string, every time.Duration) *grantLog {
	l := &grantLog{rq: map[string]int64{}, ga: map[string]int64{}, stop: make(chan struct{}), done: make(chan struct{}),
		key: f.O.Admission().Keys().AdmTenant(tenant, "acts")}
	go func() {
		defer close(l.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			acts, err := e.rdb.HGetAll(ctx, l.key).Result()
			if err != nil {
				l.err = err
				return
			}
			l.note(acts)
			select {
			case <-l.stop:
				return
			case <-t.C:
			}
		}
	}()
	return l
}

func (l *grantLog) note(acts map[string]string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for a, raw := range acts {
		var r struct {
			Rq int64 `json:"rq"`
			Ga int64 `json:"ga"`
		}
		if json.Unmarshal([]byte(raw), &r) != nil {
			continue
		}
		if r.Rq > 0 && l.rq[a] == 0 {
			l.rq[a] = r.Rq
		}
		if r.Ga > 0 && l.ga[a] == 0 {
			l.ga[a] = r.Ga
		}
	}
}

// sinceFirst is the grants of acts seen, in order, as time since the
// first request among them.
func (l *grantLog) sinceFirst(acts []string) []time.Duration {
	var first int64
	for _, a := range acts {
		if rq := l.rq[a]; rq > 0 && (first == 0 || rq < first) {
			first = rq
		}
	}
	var out []time.Duration
	for _, a := range acts {
		if ga := l.ga[a]; ga > 0 {
			out = append(out, time.Duration(ga-first)*time.Millisecond)
		}
	}
	slices.Sort(out)
	return out
}

func (l *grantLog) finish() error {
	close(l.stop)
	<-l.done
	return l.err
}

// priority queues o.prioBacklog priority-3 runs of one tenant, then one
// priority-1 run.
func (e *env) priority(ctx context.Context, o options, on bool) (priorityResult, error) {
	policy := ""
	if on {
		policy = tenantsPolicy(map[string]float64{"p": 1})
	}
	f, err := e.fleet(ctx, fairSpec(o.fairConc, o.prioActivation, policy))
	if err != nil {
		return priorityResult{}, err
	}
	defer f.Close()
	log := startGrantLog(ctx, e, f, "p", o.prioActivation/4)
	low := runs("p", o.prioBacklog, 3)
	ids, err := startAll(ctx, f, "fair/run", low, o.producers)
	if err != nil {
		_ = log.finish()
		return priorityResult{}, err
	}
	time.Sleep(o.prioActivation) // the backlog fills the slots and waits
	high := runs("p", 1, 1)
	hid, err := startAll(ctx, f, "fair/run", high, 1)
	if err != nil {
		_ = log.finish()
		return priorityResult{}, err
	}
	timeout := 2*time.Duration(o.prioBacklog)*o.prioActivation/time.Duration(o.fairConc) + time.Minute
	sp, err := spans(ctx, f, append(ids, hid...), append(low, high...), timeout)
	if lerr := log.finish(); err == nil {
		err = lerr
	}
	if err != nil {
		return priorityResult{}, err
	}
	return priorityTally(sp, ids, hid[0], log, on), nil
}

// priorityTally is the priority row of the spans sp: the priority-3
// runs' (ids), then the priority-1 run's (hid). It counts the priority-3
// runs started between its request and its start, those started after
// it, and, with admission on, those granted between its request and its
// grant (log).
func priorityTally(sp []span, ids []string, hid string, log *grantLog, on bool) priorityResult {
	h := sp[len(sp)-1]
	r := priorityResult{wait: h.wait()}
	hrq, hga := log.rq[hid], log.ga[hid]
	if on && (hrq == 0 || hga == 0) {
		r.granted = -1 // its record came and went between two polls
	}
	for i, s := range sp[:len(sp)-1] {
		switch {
		case s.Started.After(h.Created) && s.Started.Before(h.Started):
			r.between++
		case !s.Started.Before(h.Started):
			r.after++
		}
		if ga := log.ga[ids[i]]; on && r.granted >= 0 && ga > hrq && ga < hga {
			r.granted++
		}
	}
	return r
}
