package orchestrator

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/config"
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

// runTags decides a new run's tags: the run it belongs under decides
// them, and a start that names others is refused (tag_mismatch); a root
// takes req's, checked.
func runTags(req StartRequest, sc startContext) (map[string]string, error) {
	if err := thread.CheckTags(req.Tags); err != nil {
		return nil, err
	}
	if under := sc.under(req); under != nil {
		if len(req.Tags) > 0 && !maps.Equal(req.Tags, under.Tags) {
			return nil, thread.Refuse(thread.CodeTagMismatch, "tags: %s's tree is tagged %v, and tags are set at the root only", under.ThreadID, under.Tags)
		}
		return under.Tags, nil
	}
	return req.Tags, nil
}

// runNotify is a new run's webhook settings: its tree's (a child,
// continuation or fork; one that names another URL is refused), else
// the root's --notify URL, which must be http(s), and whether the tree
// has somewhere to send its events: the URL, or endpoints in the
// project's webhooks.yaml.
func runNotify(req StartRequest, sc startContext) (string, bool, error) {
	if under := sc.under(req); under != nil {
		if req.Notify != "" && req.Notify != under.Notify {
			return "", false, fmt.Errorf("notify: %s's tree notifies %q, and --notify is set at the root only", under.ThreadID, under.Notify)
		}
		return under.Notify, under.Webhooks, nil
	}
	if req.Notify != "" {
		if err := config.CheckWebhookURL(req.Notify); err != nil {
			return "", false, fmt.Errorf("--notify: %w", err)
		}
	}
	return req.Notify, req.Notify != "" || (sc.proj.Webhooks != nil && len(sc.proj.Webhooks.Endpoints) > 0), nil
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

// TenantRuns counts tenant's runs that Redis holds (its index, every
// shard's): those registered since tenants, for the default tenant.
func (o *Orchestrator) TenantRuns(ctx context.Context, tenant string) (int64, error) {
	keys := o.keys.AllTenantThreads(tenant)
	pipe := o.rdb.Pipeline()
	cmds := make([]*redis.IntCmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.ZCard(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, fmt.Errorf("runs of tenant %s: %w", tenant, err)
	}
	var n int64
	for _, c := range cmds {
		n += c.Val()
	}
	return n, nil
}

// KnownTenants are the tenants with runs in Redis, and the default
// tenant, sorted: what spool knows of tenants without an admission
// policy. It scans the keys of every node, for an operator's listing.
func (o *Orchestrator) KnownTenants(ctx context.Context) ([]string, error) {
	seen := map[string]bool{thread.DefaultTenant: true}
	var mu sync.Mutex
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, "spool:{*}:threads:tenant:*", 500).Iterator()
		for it.Next(ctx) {
			k := it.Val()
			t := k[strings.LastIndex(k, ":")+1:]
			if slices.Contains(o.keys.AllTenantThreads(t), k) {
				mu.Lock()
				seen[t] = true
				mu.Unlock()
			}
		}
		return it.Err()
	}
	var err error
	switch c := o.rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		return nil, fmt.Errorf("known tenants: a %T cannot scan", o.rdb)
	}
	if err != nil {
		return nil, fmt.Errorf("known tenants: %w", err)
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	slices.Sort(out)
	return out, nil
}

// PublishedPolicy is what Redis holds of the published admission policy
// (package admission's JSON: version, digest, policy), redis.Nil when
// none was ever published.
func (o *Orchestrator) PublishedPolicy(ctx context.Context) ([]byte, error) {
	return o.rdb.Get(ctx, o.keys.AdmPolicy()).Bytes()
}
