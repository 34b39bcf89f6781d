package orchestrator

import (
	"context"
	"fmt"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// Tenants and priorities. A root's tenant is its start's (StartRequest.Tenant,
// else thread.DefaultTenant) and its priority its start's, else its
// tenant's default (Config.TenantPriority); every descendant,
// continuation, resume and fork has its root's: a tenant is who pays and
// whose share is used, so a tree never crosses tenants, and a start that
// names another tenant or priority than the run it belongs under is
// refused (tenant_mismatch, priority_mismatch). Both are written in the
// record and the ledger entry at registration and never change.

// KeyInput is what a run's concurrency keys are computed from
// (Config.ConcurrencyKeys), once, when it is registered: its kind and
// name (directive or graph), validated inputs, tenant, parent ("" for a
// root) and root (its tree's first run).
type KeyInput struct {
	Kind, Name     string
	Inputs         map[string]any
	Tenant         string
	Parent, Root   string
	ThreadID       string
	IdempotencyKey string
}

// runTenant decides a new run's tenant and priority (see above): the
// run it belongs under (its parent, the thread it continues, the thread it
// forks) decides them; a root takes req's, validated.
func (o *Orchestrator) runTenant(ctx context.Context, req StartRequest, sc startContext) (string, int, error) {
	if req.Tenant != "" {
		if err := thread.CheckTenant(req.Tenant); err != nil {
			return "", 0, err
		}
	}
	if req.Priority != 0 {
		if err := thread.CheckPriority(req.Priority); err != nil {
			return "", 0, err
		}
	}
	if under := sc.under(req); under != nil {
		t, p := under.TenantOrDefault(), under.PriorityOrDefault()
		if req.Tenant != "" && req.Tenant != t {
			return "", 0, thread.Refuse(thread.CodeTenantMismatch, "tenant %s: %s runs for tenant %s, and a tree never crosses tenants", req.Tenant, under.ThreadID, t)
		}
		if req.Priority != 0 && req.Priority != p {
			return "", 0, thread.Refuse(thread.CodePriorityMismatch, "priority %d: %s runs at priority %d, which its whole tree has", req.Priority, under.ThreadID, p)
		}
		return t, p, nil
	}
	t := thread.TenantOrDefault(req.Tenant)
	if req.Priority != 0 {
		return t, req.Priority, nil
	}
	p, err := o.TenantPriority(ctx, t)
	return t, p, err
}

// under is the run a new run belongs under, whose tenant and priority
// it takes: the thread it continues, the thread it forks, or its parent;
// nil for a root.
func (sc startContext) under(req StartRequest) *registry.Record {
	switch {
	case sc.prev != nil:
		return sc.prev
	case req.Fork != nil:
		return req.Fork.From
	case sc.parent != nil:
		return sc.parent
	}
	return nil
}

// TenantPriority is tenant's default priority: Config.TenantPriority's
// (the admission policy's), else thread.DefaultPriority.
func (o *Orchestrator) TenantPriority(ctx context.Context, tenant string) (int, error) {
	if o.cfg.TenantPriority == nil {
		return thread.DefaultPriority, nil
	}
	p, err := o.cfg.TenantPriority(ctx, tenant)
	if err != nil {
		return 0, fmt.Errorf("default priority of tenant %s: %w", tenant, err)
	}
	if p == 0 {
		return thread.DefaultPriority, nil
	}
	if err := thread.CheckPriority(p); err != nil {
		return 0, fmt.Errorf("default priority of tenant %s: %w", tenant, err)
	}
	return p, nil
}

// concurrencyKeys are a new run's concurrency keys: a continuation
// carries its chain's, anything else gets Config.ConcurrencyKeys's (the
// admission policy's rules over it), none without it.
func (o *Orchestrator) concurrencyKeys(ctx context.Context, sc startContext, nt *registry.NewThread) ([]registry.ConcurrencyKey, error) {
	if sc.prev != nil {
		return sc.prev.ConcurrencyKeys, nil
	}
	if o.cfg.ConcurrencyKeys == nil {
		return nil, nil
	}
	kind, root := registry.KindThread, nt.ThreadID
	if nt.Kind == registry.KindGraph {
		kind = registry.KindGraph
	}
	if sc.parent != nil {
		root = sc.parent.TreeID()
	}
	keys, err := o.cfg.ConcurrencyKeys(ctx, KeyInput{Kind: kind, Name: nt.Directive, Inputs: nt.Inputs, Tenant: nt.Tenant,
		Parent: nt.ParentID, Root: root, ThreadID: nt.ThreadID, IdempotencyKey: nt.IdempotencyKey})
	if err != nil {
		return nil, fmt.Errorf("concurrency keys of %s: %w", nt.ThreadID, err)
	}
	return keys, nil
}
