package spooltype

// Tenant is a tenant's admission standing and settings: what `spool
// tenant show --json` prints (`tenant list --json` is a list of them),
// GET /v1/tenants/{t} answers and MCP show_tenant returns.
type Tenant struct {
	Tenant   string  `json:"tenant"`
	Weight   float64 `json:"weight"`
	Priority int     `json:"priority"`
	// Share is the tenant's fair share of the fleet's worker slots now
	// (0 while none is fresh: its next request takes a provisional one).
	Share int `json:"share"`
	// Running are its claimed activations, Admitted those granted and
	// not ended (running or on their way to a worker), Ready those that
	// wait only for a worker slot (granted ones not yet claimed
	// included), Blocked those that wait on something more workers would
	// not help, by reason (concurrency, tenant_concurrency, ...).
	Running  int            `json:"running"`
	Admitted int            `json:"admitted"`
	Ready    int            `json:"ready"`
	Blocked  map[string]int `json:"blocked"`
	// RunsInFlight are its root chains admitted and not finished; Runs
	// how many of its runs Redis holds.
	RunsInFlight int          `json:"runs_in_flight"`
	Runs         int64        `json:"runs"`
	Limits       TenantLimits `json:"limits"`
	// Spend is its spend in the current UTC day and month.
	Spend map[string]TenantSpend `json:"spend"`
	// Keys are its concurrency keys with activations holding or waiting
	// for a slot.
	Keys []TenantKey `json:"keys"`
	// Sources name where each setting comes from: override (spool tenant
	// set), tenant (its entry in the policy), tenant_defaults, default.
	Sources map[string]string `json:"sources"`
	// Overrides are the settings `spool tenant set` gave it.
	Overrides map[string]string `json:"overrides"`
}

// TenantLimits are a tenant's ceilings; null is unset.
type TenantLimits struct {
	MaxRunning      *int     `json:"max_running"`
	SpendPerDay     *float64 `json:"spend_per_day"`
	SpendPerMonth   *float64 `json:"spend_per_month"`
	StartsPerMinute *int     `json:"starts_per_minute"`
	RunsInFlight    *int     `json:"runs_in_flight"`
	OnExhausted     string   `json:"on_exhausted"`
}

// TenantSpend is a tenant's spend in one window (a UTC day
// "2026-12-01", or month "2026-12"): what was spent, what is lent to
// running activations, the ceiling (null: none), and the overrun: what
// runs spent beyond the allowances lent to them (spend no ceiling could
// stop), which spent does not count (the runs spent spent + overrun), in
// USD as the others.
type TenantSpend struct {
	Window  string   `json:"window"`
	Spent   float64  `json:"spent"`
	Held    float64  `json:"held"`
	Limit   *float64 `json:"limit"`
	Overrun float64  `json:"overrun"`
}

// TenantKey is one concurrency key of a tenant: the rule, the value (as
// admission keeps it: a long or unusual value as sha256:<hex>), the
// activations holding a slot of it, its max, and those waiting for one.
type TenantKey struct {
	Rule    string `json:"rule"`
	Value   string `json:"value"`
	Running int    `json:"running"`
	Max     int    `json:"max"`
	Waiting int    `json:"waiting"`
}
