package orchestrator

import (
	"context"
	"slices"

	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// TenantStatus is tenant's admission standing and settings with how many
// of its runs Redis holds (spool tenant show). A tenant nothing knows of
// (no admission state or override, not listed, no runs; default is
// always known) is tenant_not_found.
func (o *Orchestrator) TenantStatus(ctx context.Context, tenant string) (*spooltype.Tenant, error) {
	if err := thread.CheckTenant(tenant); err != nil {
		return nil, err
	}
	t, exists, err := o.adm.Status(ctx, tenant)
	if err != nil {
		return nil, err
	}
	if t.Runs, err = o.TenantRuns(ctx, tenant); err != nil {
		return nil, err
	}
	if !exists && t.Runs == 0 && tenant != thread.DefaultTenant {
		return nil, thread.Refuse(thread.CodeTenantNotFound, "tenant %q not found", tenant)
	}
	return t, nil
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
	if _, err := o.adm.SetTenant(ctx, tenant, set, cleared); err != nil {
		return nil, err
	}
	return o.TenantStatus(ctx, tenant)
}
