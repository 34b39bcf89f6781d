package orchestrator

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// WaitingReasons are what a waiting run may wait for: a decision or
// work of its own (children, approval, rate_limit, retry, sleep; unpaused: its
// wake-up after an unpause) or admission
// (capacity, concurrency and the tenant ceilings). `thread list
// --waiting-for` and GET /v1/threads?waiting_for= take one of them.
var WaitingReasons = append([]string{registry.WaitingForChildren, registry.WaitingForApproval, registry.WaitingForRateLimit,
	registry.WaitingForRetry, registry.WaitingForSleep, registry.WaitingForUnpause}, admission.WaitReasons...)

// CheckWaitingFor refuses a reason that is none of WaitingReasons.
func CheckWaitingFor(reason string) error {
	if !slices.Contains(WaitingReasons, reason) {
		return fmt.Errorf("waiting_for %q: want one of %s", reason, strings.Join(WaitingReasons, ", "))
	}
	return nil
}

// isAdmissionWait reports whether reason is one admission holds a run
// for.
func isAdmissionWait(reason string) bool { return slices.Contains(admission.WaitReasons, reason) }

// admissionWaiting lists the runs that f matches which admission holds
// for f.WaitingFor now, read live: a run's reason changes as it moves
// between its tenant's queues (parked for capacity, then held for its
// key when the grant loop reaches it while the key is full), and its
// record keeps the reason it was parked with.
// A reason "" lists the runs admission holds for any reason.
func (o *Orchestrator) admissionWaiting(ctx context.Context, f registry.Filter) ([]*registry.Record, error) {
	reason, limit := f.WaitingFor, f.Limit
	f.WaitingFor, f.Status, f.Limit = "", thread.StatusWaiting, 0
	recs, err := o.reg.List(ctx, f)
	if err != nil {
		return nil, err
	}
	held, err := o.admissionWaits(ctx, recs)
	if err != nil {
		return nil, err
	}
	out := []*registry.Record{}
	for _, rec := range held {
		if reason == "" || rec.WaitingFor == reason {
			out = append(out, rec)
			if limit > 0 && len(out) == limit {
				break
			}
		}
	}
	return out, nil
}

// TenantWaiting lists the runs of tenant that admission holds now, each
// with where it waits read live (Record.WaitingFor, WaitingKey,
// WaitingSince, Position), newest first: the monitor's tenant page.
func (o *Orchestrator) TenantWaiting(ctx context.Context, tenant string) ([]*registry.Record, error) {
	if err := thread.CheckTenant(tenant); err != nil {
		return nil, err
	}
	return o.admissionWaiting(ctx, registry.Filter{Tenant: tenant})
}

// CheckTenantFields refuses a field to clear that is no tenant setting,
// so a `tenant set` or a PATCH that names one changes nothing.
func CheckTenantFields(cleared []string) error {
	for _, f := range cleared {
		if !slices.Contains(admission.Fields, f) {
			return fmt.Errorf("clear %q: %s", f, admission.UnknownSetting(f))
		}
	}
	return nil
}

// TenantStatus is tenant's admission standing and settings with how many
// of its runs Redis holds (spool tenant show). A tenant nothing knows of
// (no admission state or override, not listed, no runs; default is
// always known) is tenant_not_found.
func (o *Orchestrator) TenantStatus(ctx context.Context, tenant string) (*spooltype.Tenant, error) {
	t, exists, err := o.tenantStatus(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if !exists {
		return nil, thread.Refuse(thread.CodeTenantNotFound, "tenant %q not found", tenant)
	}
	return t, nil
}

// BoundTenantStatus is TenantStatus for the tenant a token or `spool
// mcp --tenant` is bound to, which exists for its caller before it has
// runs or admission state.
func (o *Orchestrator) BoundTenantStatus(ctx context.Context, tenant string) (*spooltype.Tenant, error) {
	t, _, err := o.tenantStatus(ctx, tenant)
	return t, err
}

// tenantStatus is tenant's status and whether anything knows of it.
func (o *Orchestrator) tenantStatus(ctx context.Context, tenant string) (*spooltype.Tenant, bool, error) {
	if err := thread.CheckTenant(tenant); err != nil {
		return nil, false, err
	}
	t, exists, err := o.adm.Status(ctx, tenant)
	if err != nil {
		return nil, false, err
	}
	if t.Runs, err = o.TenantRuns(ctx, tenant); err != nil {
		return nil, false, err
	}
	return t, exists || t.Runs > 0 || tenant == thread.DefaultTenant, nil
}

// TenantStatuses are the TenantStatus of every tenant known: those with
// runs, admission state or an entry in the policy.
func (o *Orchestrator) TenantStatuses(ctx context.Context) ([]*spooltype.Tenant, error) {
	names, err := o.KnownTenants(ctx)
	if err != nil {
		return nil, err
	}
	more, err := o.adm.KnownTenants(ctx)
	if err != nil {
		return nil, err
	}
	for _, t := range more {
		if !slices.Contains(names, t) {
			names = append(names, t)
		}
	}
	slices.Sort(names)
	out := make([]*spooltype.Tenant, 0, len(names))
	for _, n := range names {
		t, err := o.TenantStatus(ctx, n)
		if err != nil {
			return nil, err
		}
		out = append(out, t)
	}
	return out, nil
}

// SetTenant writes tenant's overrides (`spool tenant set`, PATCH
// /v1/tenants/{t}) and lets start at once what the new room admits; it
// returns the tenant as it stands then.
func (o *Orchestrator) SetTenant(ctx context.Context, tenant string, set map[string]string, cleared []string) (*spooltype.Tenant, error) {
	if err := thread.CheckTenant(tenant); err != nil {
		return nil, err
	}
	if err := CheckTenantFields(cleared); err != nil {
		return nil, err
	}
	if _, err := o.adm.SetTenant(ctx, tenant, set, cleared); err != nil {
		return nil, err
	}
	return o.TenantStatus(ctx, tenant)
}
