package keyspace

// Admission's keys (package admission). A tenant's admission state is
// the same fixed keys in the tenant's slot (TenantPrefix): AdmTenantKeys,
// in the order its scripts take them. What is the whole fleet's (the
// published policy, the worker registry, the active tenants, the
// balancer's last pass) carries the namespace's tag.

// admTenantNames are the tenant's admission keys, in the order of
// admission.lua's adm.keys.
var admTenantNames = []string{"conf", "over", "state", "acts", "leases", "ready", "kheld", "kwait", "kq", "bq", "roots", "spend", "lapsed"}

// AdmTenant is tenant's admission key name (one of AdmTenantKeys): in a
// sharded space "spool:{ns:t:<tenant>}:adm:<name>", in a one-slot space
// "spool:{ns}:adm:t:<tenant>:<name>".
func (s Space) AdmTenant(tenant, name string) string {
	if s.shards == nil {
		return s.TenantPrefix(tenant) + name
	}
	return s.TenantPrefix(tenant) + "adm:" + name
}

// AdmTenantKeys are the keys every tenant script of admission takes, in
// its order: conf, over, state, acts, leases, ready, kheld, kwait, kq,
// bq, roots, spend, lapsed.
func (s Space) AdmTenantKeys(tenant string) []string {
	out := make([]string, len(admTenantNames))
	for i, n := range admTenantNames {
		out[i] = s.AdmTenant(tenant, n)
	}
	return out
}

// AdmPolicy is the string holding the published admission policy (JSON:
// its version, digest and body; off: no body).
func (s Space) AdmPolicy() string { return s.prefix + "adm:policy" }

// AdmWorkers is the hash of live workers: worker id → its concurrency,
// queues and expiry (JSON).
func (s Space) AdmWorkers() string { return s.prefix + "adm:workers" }

// AdmTenants is the sorted set of tenants with admission state, scored by
// when each was last seen active (unix ms).
func (s Space) AdmTenants() string { return s.prefix + "adm:tenants" }

// AdmBalance is the hash of the balancer's last pass: capacity, the
// active tenants' weights, its time.
func (s Space) AdmBalance() string { return s.prefix + "adm:balance" }

// AdmWake is the pub/sub channel that wakes the balancer when a tenant
// turns active.
func (s Space) AdmWake() string { return s.prefix + "adm:wake" }
