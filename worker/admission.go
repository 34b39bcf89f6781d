package worker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/telemetry"
)

// Admission at the worker (package admission). A task's activation is
// claimed from admission before the registry (adm_claim before
// claim.lua): a grant becomes a running lease; a task without a grant (a
// delayed one, a redelivery) is admitted there or parked and
// acknowledged. The worker renews its running leases with one adm_renew
// per tenant per renewal (admissionRenewer), stops an activation whose
// grant it could not renew (errGrantLost), hands back at a turn or step
// boundary an activation that ran past yield_after while its tenant is
// over its share (errYield), and releases every grant at its
// activation's end, whatever the end.

// errGrantLost stops an activation whose admission grant is gone (its
// renewal found it reaped, or lost by a failover and not re-asserted):
// it hands the thread back at once, as a draining worker does, and the
// task's retry is admitted afresh.
var errGrantLost = fmt.Errorf("admission grant lost: %w", errDraining)

// errYield ends an activation that yielded its slot (8.3): it released
// its lease and grant after its last checkpoint and requested admission
// again, as a recovery at its version.
var errYield = errors.New("activation yielded its slot to its tenant's fair share")

// grant is the admission grant of one activation this worker runs.
type grant struct {
	tenant, act, token string
	// record is the grant's record as claimed: a renewal re-asserts it
	// after a failover lost it.
	record   string
	priority int
	since    time.Time
	ctl      *control
	// handBack: re-asserted over a full key; yield at the next boundary.
	handBack atomic.Bool
	// allowance is what the activation may spend before it tops up
	// (nano-dollars; -1: its tenant has no spend limit); startSpend its
	// thread's spend at the claim, spent its spend since (nano: 0 until
	// its thread ran, as for an activation whose registry claim was
	// refused, which spent nothing), chain
	// the root chain that ended with it: what its release settles.
	allowance  int64
	startSpend float64
	spent      int64
	chain      string
	// before is the run's admitted activation before this one and
	// beforeSpent what it spent (nano; -1: unknown), read at the claim:
	// the release settles its allowance if its lease was reaped.
	before      string
	beforeSpent int64
	// stop stops the activation when its grant was not renewed in time
	// (I1): armed at the claim, pushed back by each renewal.
	mu   sync.Mutex
	stop *time.Timer
	done bool // its activation ended: no more stops
}

// stopMargin is how long before its lease's expiry a worker stops an
// activation whose grant it could not renew: a third of the lease TTL,
// on the worker's own clock, counted from when it sent the script that
// set the expiry (the expiry is at least that late on Redis's clock).
// Another worker can be granted the slot only after the expiry, so the
// activation and its tools are gone a third of a TTL before.
func stopMargin(ttl time.Duration) time.Duration { return ttl / 3 }

// hold arms or pushes back g's stop: the script sent at sent set its
// lease to expire ttl later.
func (g *grant) hold(sent time.Time, ttl time.Duration, log func(string)) {
	d := time.Until(sent.Add(ttl - stopMargin(ttl)))
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.done {
		return
	}
	if g.stop == nil {
		g.stop = time.AfterFunc(d, func() {
			log(g.act)
			g.ctl.cancel(errGrantLost)
		})
		return
	}
	g.stop.Reset(d)
}

// disarm stops g's timer at its activation's end.
func (g *grant) disarm() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.done = true
	if g.stop != nil {
		g.stop.Stop()
	}
}

// admissions are the grants a worker holds and the highest generation of
// each tenant's state it saw (12.3).
type admissions struct {
	mu   sync.Mutex
	held map[string]*grant // token → grant
	gen  map[string]int64
}

func (s *admissions) add(g *grant, gen int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held == nil {
		s.held, s.gen = map[string]*grant{}, map[string]int64{}
	}
	s.held[g.token] = g
	s.seen(g.tenant, gen)
}

func (s *admissions) seen(tenant string, gen int64) {
	if gen > s.gen[tenant] {
		s.gen[tenant] = gen
	}
}

func (s *admissions) remove(g *grant) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.held, g.token)
}

// byTenant are the held grants by tenant, with the generation seen.
func (s *admissions) byTenant() (map[string][]*grant, map[string]int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]*grant{}
	gens := map[string]int64{}
	for _, g := range s.held {
		out[g.tenant] = append(out[g.tenant], g)
		gens[g.tenant] = s.gen[g.tenant]
	}
	return out, gens
}

// admitClaim claims act's admission before its registry claim. It
// returns the grant to release at the activation's end, and run false
// when the task is to be acknowledged unrun (parked, or another live
// activation holds it). With admission off it returns nil, true.
func (w *Worker) admitClaim(ctx context.Context, act queue.Activation, token string, ctl *control, lease time.Duration) (*grant, bool, error) {
	adm := w.o.Admission()
	// A worker that has not read the policy yet (it just started, or
	// Redis did not answer) cannot tell admission off from on: the
	// task waits for the read rather than run ungranted (I1).
	if err := adm.Watcher().Ready(ctx); err != nil {
		return nil, false, err
	}
	p := adm.Policy()
	if p == nil {
		return nil, true, nil
	}
	req := admission.RequestOfTask(act, p.Policy)
	var rec *registry.Record
	if req == nil {
		// No ticket (enqueued while admission was off, or by an older
		// version): the run's record says what admission needs.
		r, err := w.o.Services().Registry.Get(ctx, act.ThreadID)
		if errors.Is(err, registry.ErrNotFound) {
			return nil, false, nil
		}
		if err != nil {
			return nil, false, err
		}
		rec = r
		rq := admission.RequestOf(rec, act, act.Seq, p.Policy)
		req = &rq
	}
	sent := time.Now()
	c, err := adm.Claim(ctx, *req, token, lease)
	if err != nil {
		return nil, false, err
	}
	switch c.Verdict {
	case admission.ClaimBusy:
		w.log.Debug("activation dropped: another activation holds its grant", "thread_id", act.ThreadID, "activation", req.Act)
		return nil, false, nil
	case admission.ClaimPark:
		w.noteParked(ctx, rec, act.ThreadID, req, c.WaitingFor)
		return nil, false, nil
	}
	g := &grant{tenant: req.Tenant, act: req.Act, token: token, record: c.Record, priority: req.Priority, since: time.Now(), ctl: ctl,
		allowance: c.Allowance}
	g.hold(sent, lease, w.lapsed)
	w.adm.add(g, c.Gen)
	return g, true, nil
}

// noteParked notes on a waiting thread that its activation was parked at
// its claim (registry.Activations.Park), so that it shows what it waits
// for and housekeeping finds it; so is a running thread no activation
// holds whose recovery was parked (one handed back for a retry). One an
// activation holds, or a redelivery, is left as it is: its recovery
// requests it again.
func (w *Worker) noteParked(ctx context.Context, rec *registry.Record, id string, req *admission.Request, waitingFor string) {
	if rec == nil {
		r, err := w.o.Services().Registry.Get(ctx, id)
		if err != nil {
			return
		}
		rec = r
	}
	if _, err := w.o.Services().Activations.Park(ctx, id, rec.Version, req.Act, req.Tenant, waitingFor); err != nil {
		w.log.Warn("parked activation not noted on its record", "thread_id", id, "activation", req.Act, "error", err)
	}
	w.log.Info("activation parked at its claim", "thread_id", id, "activation", req.Act, "waiting_for", waitingFor)
}

// admitEnd releases g at its activation's end (finalize, suspend, hand
// back, failure, lost lease: every end), and enqueues what the freed
// slots granted.
func (w *Worker) admitEnd(ctx context.Context, g *grant) {
	if g == nil {
		return
	}
	g.disarm()
	w.adm.remove(g)
	end := admission.Ending{Spent: g.spent, Chain: g.chain, Lapsed: g.before, LapsedUsed: g.beforeSpent}
	if err := w.o.Admission().Release(context.WithoutCancel(ctx), g.tenant, g.act, g.token, end); err != nil {
		w.log.Warn("admission grant not released (it is reaped when its lease lapses)", "activation", g.act, "error", err)
	}
}

// admissionID is the admission id of g's activation, which its registry
// claim notes; "" without a grant.
func (g *grant) admissionID() string {
	if g == nil {
		return ""
	}
	return g.act
}

// claimed notes what the registry's claim of g's activation read: the
// thread's spend at the claim, and the activation before it.
func (g *grant) claimed(c registry.Claim) {
	if g == nil {
		return
	}
	g.startSpend = c.Record.Cost.Spend
	g.before, g.beforeSpent = c.Before, c.BeforeSpent
}

// ended notes how g's activation of rec ended, for its release: what
// its thread spent since the claim (spend, the thread's spend now; a
// graph run spends nothing itself), and its root chain when the run
// finished without handing off (end: the path's end, err its error).
func (g *grant) ended(rec *registry.Record, end pathEnd, err error) {
	if g == nil {
		return
	}
	if n, cerr := ledger.ToNano(max(end.spend-g.startSpend, 0)); cerr == nil {
		g.spent = n
	}
	if err == nil && end.final != nil && !end.handedOff {
		g.chain = orchestrator.ChainEnded(rec)
	}
}

// allowanceLeft tops up g's spend allowance before a model call (9.2
// step 3) when the thread's spend since the claim (spend, the thread's
// spend now) and the next call's estimate (est) may not fit in it, once
// per turn; it reports false when the tenant's windows had no room
// left to lend and the allowance is spent. An activation without an
// allowance (no spend limit) always has room.
func (w *Worker) allowanceLeft(ctx context.Context, g *grant, spend, est float64, turn int) bool {
	return w.topUp(ctx, g, spend, est, fmt.Sprintf("%s:%d", g.admissionID(), turn))
}

// coverSpend tops up g's spend allowance after a model call whose cost
// took the thread's spend since the claim (spend, the thread's spend
// now) past it, before the turn's charge (9.2 step 3): what the windows
// have room for is lent, so only what they cannot cover is overrun at
// the release. Once per turn (id <activation>:<turn>:charge).
func (w *Worker) coverSpend(ctx context.Context, g *grant, spend float64, turn int) {
	w.topUp(ctx, g, spend, 0, fmt.Sprintf("%s:%d:charge", g.admissionID(), turn))
}

// topUp lends g what its thread's spend since the claim (spend, the
// thread's spend now) and est (USD) need beyond its allowance, once per
// id, and reports whether the allowance then has room left. A failed
// top-up (its grant is gone: its renewal stops it; or Redis did not
// answer) reports room: the spend is settled at the release.
func (w *Worker) topUp(ctx context.Context, g *grant, spend, est float64, id string) bool {
	if g == nil || g.allowance < 0 {
		return true
	}
	used, err := ledger.ToNano(max(spend-g.startSpend, 0))
	if err != nil {
		return true
	}
	need, err := ledger.ToNano(max(est, 0))
	if err != nil || used+need <= g.allowance {
		return true
	}
	al, err := w.o.Admission().TopUp(ctx, g.tenant, g.act, g.token, used+need-g.allowance, id)
	if err != nil {
		w.log.Warn("admission: allowance not topped up", "activation", g.act, "error", err)
		return true
	}
	g.allowance = al
	return al < 0 || used < al
}

// refusesOnExhausted reports whether tenant's on_exhausted is refuse.
func (w *Worker) refusesOnExhausted(ctx context.Context, tenant string) bool {
	adm := w.o.Admission()
	p := adm.Policy()
	if p == nil {
		return false
	}
	over, err := adm.Overrides(ctx, tenant)
	if err != nil {
		return false
	}
	return admission.Effective(p.Policy, tenant, over).OnExhausted == admission.OnExhaustedRefuse
}

// yieldDue reports whether the activation of g should yield its slot now
// (8.3): it ran past yield_after and its tenant is over its share or has
// a better priority waiting, or a renewal re-asserted it over a full key.
func (w *Worker) yieldDue(ctx context.Context, g *grant) bool {
	if g == nil {
		return false
	}
	if g.handBack.Load() {
		return true
	}
	adm := w.o.Admission()
	p := adm.Policy()
	if p == nil {
		return false
	}
	after := p.Policy.YieldAfter()
	if after <= 0 || time.Since(g.since) < after {
		return false
	}
	st, err := adm.Standing(ctx, g.tenant)
	return err == nil && st.Over(g.priority)
}

// yield hands the activation's thread back to admission after it yielded
// (errYield): its registry lease released, it requests admission again
// as a recovery at the version it holds (class 0), enqueued once granted.
func (w *Worker) yield(ctx context.Context, rec *registry.Record, version int64) {
	ctx = context.WithoutCancel(ctx)
	if err := w.o.Readmit(ctx, rec.ThreadID, version); err != nil {
		w.log.Warn("yielded activation not requested again (its recovery does it)", "thread_id", rec.ThreadID, "error", err)
	}
}

// renewAdmissions renews the leases of every grant this worker holds,
// one script per tenant, every quarter of the lease TTL, until ctx ends:
// a grant stops its activation a third of a TTL before its expiry
// (grant.hold), so a renewal may take up to 5/12 of a TTL to answer,
// or one may fail and the next answer within a sixth, before an
// activation stops.
func (w *Worker) renewAdmissions(ctx context.Context, ttl time.Duration) {
	t := time.NewTicker(ttl / 4)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.renewOnce(ctx, ttl)
		}
	}
}

// lapsed logs an activation stopped because its grant's renewal did not
// answer in time.
func (w *Worker) lapsed(act string) {
	w.log.Warn("admission grant not renewed in time: the activation stops before its lease lapses", "activation", act)
}

// renewOnce is one renewal of every tenant's grants: a renewed grant's
// stop is pushed back, a lost grant stops its activation; one
// re-asserted over a full key hands back at its next turn.
func (w *Worker) renewOnce(ctx context.Context, ttl time.Duration) {
	adm := w.o.Admission()
	byTenant, gens := w.adm.byTenant()
	for tenant, gs := range byTenant {
		held := make([]admission.Held, len(gs))
		byAct := map[string]*grant{}
		for i, g := range gs {
			held[i] = admission.Held{Act: g.act, Token: g.token, Record: g.record}
			byAct[g.act] = g
		}
		sent := time.Now()
		r, err := adm.Renew(ctx, tenant, gens[tenant], ttl, held)
		if err != nil {
			w.log.Warn("admission leases not renewed", "tenant", tenant, "error", err)
			continue
		}
		w.adm.mu.Lock()
		w.adm.seen(tenant, r.Gen)
		w.adm.mu.Unlock()
		for _, a := range r.Lost {
			if g := byAct[a]; g != nil {
				w.log.Warn("admission grant lost: the activation stops", "activation", a, "tenant", tenant)
				g.ctl.cancel(errGrantLost)
				delete(byAct, a)
			}
		}
		for _, g := range byAct {
			g.hold(sent, ttl, w.lapsed)
		}
		for _, a := range r.HandBack {
			if g := byAct[a]; g != nil {
				g.handBack.Store(true)
			}
		}
		if r.Fenced {
			w.log.Warn("admission: the tenant's state went back (a failover lost writes): fenced, grants re-asserted", "tenant", tenant)
		}
	}
}

// registerLoop keeps this worker in the worker registry (capacity for the
// fair shares) every admission.RegisterEvery, and names the tenants it
// runs as active; Stop deregisters it.
func (w *Worker) registerLoop(ctx context.Context) {
	t := time.NewTicker(admission.RegisterEvery)
	defer t.Stop()
	for {
		w.register(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (w *Worker) register(ctx context.Context) {
	sv := w.o.Services()
	ks := w.o.Admission().Keys()
	queues := make([]string, 0, len(w.cfg.Queues))
	for q := range w.cfg.Queues {
		queues = append(queues, q)
	}
	if err := admission.Register(ctx, sv.Redis, ks, w.token, w.cfg.Concurrency, queues, w.o.Now()); err != nil && ctx.Err() == nil {
		w.log.Warn("worker registry: not registered", "error", err)
	}
	byTenant, _ := w.adm.byTenant()
	tenants := make([]string, 0, len(byTenant))
	for t := range byTenant {
		tenants = append(tenants, t)
	}
	if w.o.Admission().Policy() != nil {
		_ = admission.Touch(ctx, sv.Redis, ks, w.o.Now(), tenants)
	}
}

// deregister takes this worker out of the worker registry (a stop).
func (w *Worker) deregister() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := admission.Deregister(ctx, w.o.Services().Redis, w.o.Admission().Keys(), w.token); err != nil {
		w.log.Warn("worker registry: not deregistered (the entry lapses)", "error", err)
	}
}

// startAdmission starts what admission runs beside the activations: the
// policy watcher, the worker registry, the grants' renewer and the
// balancer.
func (w *Worker) startAdmission(ctx context.Context) {
	adm := w.o.Admission()
	for _, f := range []func(context.Context){
		adm.Watcher().Run,
		w.registerLoop,
		func(ctx context.Context) { w.renewAdmissions(ctx, w.o.Services().LeaseTTL) },
		admission.NewBalancer(adm, w.token).Run,
	} {
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			f(ctx)
		}()
	}
}

// grantAttributes sets the activation span's admission attributes: its
// class, its wait from request to grant and what for, its keys.
func grantAttributes(span trace.Span, g *grant) {
	if g == nil {
		return
	}
	var e admission.Entry
	if json.Unmarshal([]byte(g.record), &e) != nil {
		return
	}
	wait := int64(0)
	if e.GrantedAt > 0 && e.RequestedAt > 0 {
		wait = e.GrantedAt - e.RequestedAt
	}
	span.SetAttributes(telemetry.AdmissionClass.Int(e.Class), telemetry.AdmissionWaitMS.Int64(wait),
		telemetry.AdmissionReason.String(cmp.Or(e.Why, admission.WaitCapacity)), telemetry.ConcurrencyKeys.StringSlice(e.Keys))
}

// yielded records on the activation's span that it yields its slot.
func yielded(ctx context.Context) {
	trace.SpanFromContext(ctx).AddEvent(telemetry.EventAdmissionYield)
}
