package orchestrator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// Admission (package admission). Every activation the orchestrator
// enqueues (a start, a wake, a continuation, a recovery, a requeue) is
// admitted first (admitAndEnqueue): while a policy is published, a grant
// is enqueued as before and a parked activation is not enqueued at all,
// its record noted waiting (registry.Activations.Park) until a freed slot
// or a pump grants and enqueues it. With no policy it is enqueued as
// before, at the cost of one atomic load.

// Admission is the orchestrator's admission: its published policy as
// this process last read it, and the tenant scripts.
func (o *Orchestrator) Admission() *admission.Admitter { return o.adm }

// newAdmitter is o's admitter, its policy read at the first activation
// (a long-lived process runs its watcher: Watcher.Run).
func newAdmitter(o *Orchestrator) *admission.Admitter {
	w := admission.NewWatcher(o.rdb, o.keys, o.log)
	return admission.New(admission.Config{Redis: o.fast, Keys: o.keys, Now: o.cfg.Now, Policy: w, Enqueuer: o.enq, Logger: o.log})
}

// admitAndEnqueue enqueues activation a (sequence number seq) of run rec
// once admission grants it (10.1); reenqueue replaces a task asynq holds
// as done (Reenqueue). It reports whether the activation is enqueued
// now (false: parked, or, with reenqueue, already on its way).
func (o *Orchestrator) admitAndEnqueue(ctx context.Context, rec *registry.Record, a queue.Activation, seq int64, reenqueue bool) (bool, error) {
	p := o.adm.Policy()
	if p == nil {
		if reenqueue {
			return o.enq.Reenqueue(ctx, o.Inspector(), a, seq, rec.Queue)
		}
		return true, o.enq.Enqueue(ctx, a, seq, rec.Queue)
	}
	req := admission.RequestOf(rec, a, seq, p.Policy)
	d, err := o.adm.Request(ctx, req)
	if err != nil && !errors.Is(err, queue.ErrNotEnqueued) {
		// The request did not reach Redis, or its grant was not
		// enqueued: either way the activation is not on its way.
		err = fmt.Errorf("%w: %w", queue.ErrNotEnqueued, err)
	}
	if err != nil {
		return false, err
	}
	if d.Refused {
		return false, o.refuseAdmission(ctx, rec, d)
	}
	if !d.Parked {
		return true, nil
	}
	if _, err := o.acts.Park(ctx, rec.ThreadID, rec.Version, req.Act, req.Tenant, d.WaitingFor); err != nil {
		o.threadLog(rec.ThreadID).Warn("parked activation not noted on its record", "activation", req.Act, "error", err)
	}
	o.threadLog(rec.ThreadID).Info("activation waits for admission", "activation", req.Act, "waiting_for", d.WaitingFor, "key", d.WaitKey)
	return false, nil
}

// refuseAdmission ends rec, a root whose first admission met its
// tenant's ceiling under on_exhausted: refuse (9.4), error with the
// ceiling's code, so the refusal is on record (an idempotent replay
// returns it), and returns the refusal: a *thread.AdmissionError naming
// the run, with the time until the ceiling's known reset.
func (o *Orchestrator) refuseAdmission(ctx context.Context, rec *registry.Record, d admission.Decision) error {
	code := admission.RefusalCode(d.WaitingFor)
	msg := fmt.Sprintf("tenant %s is at its %s ceiling (on_exhausted: refuse)", rec.TenantOrDefault(), ceilingName(d.WaitingFor))
	ae := &thread.AdmissionError{Code: code, Message: msg, Run: rec.ThreadID}
	if !d.RetryAt.IsZero() {
		ae.RetryAfter = max(d.RetryAt.Sub(o.Now()), time.Second)
		ae.Message += fmt.Sprintf("; room again at %s", d.RetryAt.UTC().Format(time.RFC3339))
	}
	if err := o.fail(context.WithoutCancel(ctx), rec, code, ae.Message); err != nil {
		return fmt.Errorf("refused start of %s not recorded: %w", rec.ThreadID, err)
	}
	o.threadLog(rec.ThreadID).Info("start refused by a tenant ceiling", "code", code)
	return ae
}

// ceilingName is the setting of a ceiling's wait reason.
func ceilingName(reason string) string {
	switch reason {
	case admission.WaitTenantBudget:
		return "spend window"
	case admission.WaitTenantRate:
		return "starts_per_minute"
	case admission.WaitTenantRuns:
		return "runs_in_flight"
	}
	return reason
}

// readmitParked makes sure each thread noted parked is still in its
// tenant's queues: a request Redis lost (a failover), or one made before
// `admission off` and `admission apply` again, is made again (a request
// is once per activation: one still there changes nothing). It returns
// how many it requested.
func (o *Orchestrator) readmitParked(ctx context.Context) (int, error) {
	p := o.adm.Policy()
	if p == nil {
		return 0, nil
	}
	parked, err := o.acts.ParkedThreads(ctx)
	if err != nil {
		return 0, err
	}
	byTenant := map[string][]string{}
	for _, pk := range parked {
		byTenant[pk.Tenant] = append(byTenant[pk.Tenant], pk.Act)
	}
	held, err := o.wheres(ctx, byTenant)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, pk := range parked {
		if _, ok := held[pk.Tenant][pk.Act]; ok {
			continue
		}
		rec, err := o.reg.Get(ctx, pk.ThreadID)
		if err != nil || rec.Version != pk.Version {
			continue
		}
		a, seq := activationOf(pk.Act, rec)
		o.threadLog(rec.ThreadID).Info("parked activation requested again: its tenant's state lost it", "activation", pk.Act)
		if _, err := o.admitAndEnqueue(ctx, rec, a, seq, true); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// endLostChains ends the root chains a tenant counts in flight whose
// latest run has finished (or is gone): the release that ends a chain
// with its last activation was lost (its worker died after the
// finalize), which would hold a slot of runs_in_flight for good. Only
// tenants with a runs_in_flight ceiling are looked at. It returns how
// many it ended.
func (o *Orchestrator) endLostChains(ctx context.Context) (int, error) {
	return o.eachTenant(ctx, func(p *admission.Published, t string) (int, error) {
		over, err := o.adm.Overrides(ctx, t)
		if err != nil {
			return 0, err
		}
		if admission.Effective(p.Policy, t, over).RunsInFlight == 0 {
			return 0, nil
		}
		return o.endLostChainsOf(ctx, t)
	})
}

// eachTenant runs fn for every tenant admission knows while a policy is
// published, and sums what it counts; the first error ends it.
func (o *Orchestrator) eachTenant(ctx context.Context, fn func(p *admission.Published, tenant string) (int, error)) (int, error) {
	p := o.adm.Policy()
	if p == nil {
		return 0, nil
	}
	tenants, err := o.adm.KnownTenants(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, t := range tenants {
		k, err := fn(p, t)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// endLostChainsOf is endLostChains of tenant t.
func (o *Orchestrator) endLostChainsOf(ctx context.Context, t string) (int, error) {
	roots, err := o.adm.ChainsInFlight(ctx, t)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, root := range roots {
		rec, err := o.Latest(ctx, root)
		if err != nil && !errors.Is(err, registry.ErrNotFound) {
			return n, err
		}
		if err == nil && !rec.Status.Terminal() {
			continue
		}
		o.log.Info("root chain ended: its end's release was lost", "tenant", t, "chain", root)
		if err := o.adm.EndChain(ctx, t, root); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// activationOf is the task of activation id act of rec: its reason and
// sequence number ("<thread>" is the start, "<thread>@<reason>-<seq>"
// any other).
func activationOf(act string, rec *registry.Record) (queue.Activation, int64) {
	a := queue.Activation{ThreadID: rec.ThreadID, Reason: "start"}
	rest, ok := strings.CutPrefix(act, rec.ThreadID+"@")
	if !ok {
		return a, 0
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return a, 0
	}
	seq, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return a, 0
	}
	a.Reason = rest[:i]
	return a, seq
}

// cancelParked removes the parked request of rec (a thread ended while it
// waited for admission), and, rec being a root, ends its root chain
// (it leaves the chains in flight of runs_in_flight), best effort: a
// request missed here is dropped at its claim, which finds the thread
// finished.
func (o *Orchestrator) cancelParked(ctx context.Context, rec *registry.Record) {
	act, chain := rec.Extra[registry.AdmActField], ChainEnded(rec)
	if act == "" && chain == "" {
		return
	}
	tenant := rec.Extra[registry.AdmTenantField]
	if tenant == "" {
		tenant = rec.TenantOrDefault()
	}
	if _, err := o.adm.Cancel(context.WithoutCancel(ctx), tenant, act, chain); err != nil {
		o.threadLog(rec.ThreadID).Warn("parked request not removed (its claim will drop it)", "activation", act, "error", err)
	}
}

// ChainEnded is the root chain that ends with rec, a run that finished
// without handing off: its chain, when rec is a root's; "" for a child.
// runs_in_flight counts root chains until then.
func ChainEnded(rec *registry.Record) string {
	if rec.ParentID != "" {
		return ""
	}
	return rec.TreeID()
}

// policyKeys is the default Config.ConcurrencyKeys: the published
// policy's rules over the run. A root of a tenant the policy does not
// admit (open_tenants: false, not listed) is refused here
// (tenant_unknown), before anything is registered.
func (o *Orchestrator) policyKeys(_ context.Context, in KeyInput) ([]registry.ConcurrencyKey, error) {
	p := o.adm.Policy()
	if p == nil {
		return nil, nil
	}
	if in.Parent == "" && !p.Policy.Admits(in.Tenant) {
		return nil, thread.Refuse(admission.CodeTenantUnknown, "tenant %s is not listed in the admission policy, whose open_tenants is false", in.Tenant)
	}
	keys := p.Policy.Keys(admission.RunFacts{Kind: in.Kind, Name: in.Name, Inputs: in.Inputs, Tenant: in.Tenant, Parent: in.Parent, Root: in.Root})
	out := make([]registry.ConcurrencyKey, len(keys))
	for i, k := range keys {
		out[i] = registry.ConcurrencyKey{Rule: k.Rule, Value: k.Value}
	}
	return out, nil
}

// policyPriority is the default Config.TenantPriority: the published
// policy's priority of tenant (its override, else its entry's, else
// tenant_defaults').
func (o *Orchestrator) policyPriority(ctx context.Context, tenant string) (int, error) {
	p := o.adm.Policy()
	if p == nil {
		return thread.DefaultPriority, nil
	}
	over, err := o.adm.Overrides(ctx, tenant)
	if err != nil {
		return 0, err
	}
	return admission.Effective(p.Policy, tenant, over).Priority, nil
}

// Readmit requests admission again for running thread id at version, an
// activation that yielded its slot (its lease released after its last
// checkpoint): as the recovery of that version, class 0, enqueued once
// granted. The registry's orphan recovery of the thread makes the same
// request, so it is made once whichever comes first.
func (rt *Runtime) Readmit(ctx context.Context, id string, version int64) error {
	rec, err := rt.reg.Get(ctx, id)
	if err != nil {
		return err
	}
	_, err = rt.admitAndEnqueue(ctx, rec, queue.Activation{ThreadID: id, Reason: "recover"}, version, true)
	return err
}

// admissionWait fills in, for a run admission holds, where it waits,
// read live from its tenant's state (Record.WaitingFor, WaitingKey,
// WaitingSince, Position): its reason changes as it moves between
// queues. Best effort: the record keeps what it was parked with.
func (o *Orchestrator) admissionWait(ctx context.Context, rec *registry.Record) (admission.Where, bool) {
	tenant, act := admissionAct(rec)
	if act == "" {
		return admission.Where{}, false
	}
	w, ok, err := o.adm.Where(ctx, tenant, act)
	if err != nil || !ok {
		return admission.Where{}, false
	}
	setWait(rec, w)
	return w, true
}

// admissionAct is the tenant and activation admission holds waiting run
// rec under; act "" for a run it does not hold.
func admissionAct(rec *registry.Record) (tenant, act string) {
	act = rec.Extra[registry.AdmActField]
	if act == "" || rec.Status != thread.StatusWaiting {
		return "", ""
	}
	return cmp.Or(rec.Extra[registry.AdmTenantField], rec.TenantOrDefault()), act
}

// setWait fills in rec's wait from w.
func setWait(rec *registry.Record, w admission.Where) {
	since := w.Since.UTC()
	rec.WaitingFor, rec.WaitingKey, rec.WaitingSince, rec.Position = w.WaitingFor, w.WaitKey, &since, w.Position
}

// wheres reads where the activations of each tenant in acts stand, by
// tenant and activation: one adm_where call per tenant (per
// admission.WhereMany's batch), however many activations.
func (o *Orchestrator) wheres(ctx context.Context, acts map[string][]string) (map[string]map[string]admission.Where, error) {
	out := make(map[string]map[string]admission.Where, len(acts))
	for tenant, ids := range acts {
		ws, err := o.adm.WhereMany(ctx, tenant, ids)
		if err != nil {
			return nil, err
		}
		out[tenant] = ws
	}
	return out, nil
}

// admissionWaits fills in admissionWait's live wait on every run of recs
// admission holds, reading each tenant's runs in one adm_where call
// (admission.Admitter.WhereMany), not one per run, and returns those
// runs in recs' order; a run admission has no record of is left out.
func (o *Orchestrator) admissionWaits(ctx context.Context, recs []*registry.Record) ([]*registry.Record, error) {
	byTenant := map[string][]string{}
	for _, rec := range recs {
		if tenant, act := admissionAct(rec); act != "" {
			byTenant[tenant] = append(byTenant[tenant], act)
		}
	}
	wheres, err := o.wheres(ctx, byTenant)
	if err != nil {
		return nil, err
	}
	out := []*registry.Record{}
	for _, rec := range recs {
		tenant, act := admissionAct(rec)
		if w, ok := wheres[tenant][act]; ok && act != "" {
			setWait(rec, w)
			out = append(out, rec)
		}
	}
	return out, nil
}

// AdmissionWaitLine says where run rec waits when admission holds it,
// read live (admission.Where.Line: "concurrency per_customer=c1 (2 of 2
// running, 4th in line, 38 s)"), and fills in rec's wait as Record
// does; "" for any other run. `thread show` and the monitor's run page
// print it.
func (o *Orchestrator) AdmissionWaitLine(ctx context.Context, rec *registry.Record) string {
	w, ok := o.admissionWait(ctx, rec)
	if !ok {
		return ""
	}
	return w.Line(o.Now())
}
