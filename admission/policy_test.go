package admission

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const specPolicy = `# .ai/config/agent/admission.yaml
version: 1
idempotency: {retention: 24h}
fair_share: {interval: 1s, yield_after: 60s}
grants: {ttl: 60s, durability: replica}
open_tenants: true
tenant_defaults:
  weight: 1
  priority: 3
  on_exhausted: wait
  spend_grant: 0.10
tenants:
  default: {}
  acme:
    weight: 3
    priority: 2
    max_running: 40
    spend_per_day: 50.00
    spend_per_month: 900.00
    starts_per_minute: 120
    runs_in_flight: 500
    on_exhausted: wait
  trial: {weight: 0.5, max_running: 4, spend_per_day: 2.00, on_exhausted: refuse}
concurrency:
  - name: per_customer
    directives: ["support/*", "triage/*"]
    graphs: ["support/*"]
    key: "${inputs.customer_id}"
    max: 2
  - {name: per_repo, graphs: ["review/*"], key: "${inputs.repo || inputs.url}", max: 1}
`

func TestParseSpecExample(t *testing.T) {
	t.Parallel()
	pol, err := Parse("admission.yaml", []byte(specPolicy))
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, pol.Idempotency.Retention.D())
	require.Equal(t, time.Second, pol.FairShare.Interval.D())
	require.Equal(t, 60*time.Second, pol.YieldAfter())
	require.Len(t, pol.Concurrency, 2)
	require.Equal(t, Rule{Name: "per_repo", Graphs: []string{"review/*"}, Key: "${inputs.repo || inputs.url}", Max: 1}, pol.Concurrency[1])

	acme := Effective(pol, "acme", nil)
	require.Equal(t, 3.0, acme.Weight)
	require.Equal(t, 2, acme.Priority)
	require.Equal(t, 40, acme.MaxRunning)
	require.Equal(t, SourceTenant, acme.Source["weight"])
	other := Effective(pol, "beta", nil)
	require.Equal(t, 1.0, other.Weight)
	require.Equal(t, SourceDefaults, other.Source["weight"])
	require.Equal(t, SourceBuiltin, other.Source["max_running"])
	over := Effective(pol, "acme", map[string]string{"weight": "5", "max_running": "7"})
	require.Equal(t, 5.0, over.Weight)
	require.Equal(t, 7, over.MaxRunning)
	require.Equal(t, SourceOverride, over.Source["max_running"])
	require.Equal(t, 2, over.Priority, "a field without an override keeps its source")

	same, err := Parse("other.yaml", []byte("version: 1\nconcurrency:\n"+
		"  - {name: per_customer, directives: [support/*, triage/*], graphs: [support/*], key: '${inputs.customer_id}', max: 2}\n"+
		"  - {name: per_repo, graphs: [review/*], key: '${inputs.repo || inputs.url}', max: 1}\n"+
		"tenants: {default: {}, acme: {weight: 3, priority: 2, max_running: 40, spend_per_day: 50, spend_per_month: 900, starts_per_minute: 120, runs_in_flight: 500, on_exhausted: wait},"+
		" trial: {weight: 0.5, max_running: 4, spend_per_day: 2, on_exhausted: refuse}}\n"+
		"tenant_defaults: {weight: 1, priority: 3, on_exhausted: wait, spend_grant: 0.1}\n"))
	require.NoError(t, err)
	require.Equal(t, pol.Digest(), same.Digest(), "defaults spelled out or not, one digest")
}

// TestParseErrorsNameFileLineAndKey: every problem is one error naming
// the file, the line and the key.
func TestParseErrorsNameFileLineAndKey(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct{ yaml, want string }{
		"unknown key":       {"version: 1\nfair_share: {interval: 1s, yeild_after: 5s}\n", "p.yaml:2: fair_share.yeild_after: unknown key (known: interval, yield_after)"},
		"unknown top key":   {"version: 1\ntenant: {}\n", "p.yaml:2: tenant: unknown key"},
		"bad weight":        {"version: 1\ntenants:\n  acme:\n    weight: 0\n", "p.yaml:4: tenants.acme.weight: 0 is outside 0.01 .. 1000"},
		"bad priority":      {"version: 1\ntenant_defaults: {priority: 6}\n", "p.yaml:2: tenant_defaults.priority: 6 is outside 1 .. 5"},
		"bad on_exhausted":  {"version: 1\ntenant_defaults: {on_exhausted: later}\n", `p.yaml:2: tenant_defaults.on_exhausted: "later": want wait or refuse`},
		"duplicate rule":    {"version: 1\nconcurrency:\n  - {name: a, directives: [x], key: k, max: 1}\n  - {name: a, graphs: [y], key: k, max: 2}\n", `p.yaml:4: concurrency[1].name: duplicate rule "a"`},
		"bad key":           {"version: 1\nconcurrency:\n  - name: a\n    directives: [x]\n    key: \"${inputs.a ||}\"\n    max: 1\n", "p.yaml:5: concurrency[0].key: ${inputs.a ||}"},
		"key scope":         {"version: 1\nconcurrency:\n  - {name: a, directives: [x], key: '${state.x}', max: 1}\n", "p.yaml:3: concurrency[0].key: ${state...}: a key reads only inputs, tenant, name, kind, parent, root"},
		"no globs":          {"version: 1\nconcurrency:\n  - {name: a, key: k, max: 1}\n", "p.yaml:3: concurrency[0]: directives or graphs is required"},
		"max range":         {"version: 1\nconcurrency:\n  - {name: a, directives: [x], key: k, max: 0}\n", "p.yaml:3: concurrency[0].max: 0 is outside 1 .. 100000"},
		"bad glob":          {"version: 1\nconcurrency:\n  - {name: a, directives: ['[x'], key: k, max: 1}\n", `p.yaml:3: concurrency[0].directives: glob "[x"`},
		"no version":        {"tenants: {}\n", "p.yaml:1: version: required"},
		"bad retention":     {"version: 1\nidempotency: {retention: 31d}\n", "p.yaml:2: idempotency.retention: 31d is outside 1m .. 30d"},
		"bad interval":      {"version: 1\nfair_share: {interval: 10ms}\n", "p.yaml:2: fair_share.interval: 10ms is outside 100ms .. 1m"},
		"bad tenant name":   {"version: 1\ntenants:\n  Acme: {}\n", "p.yaml:3: tenants.Acme: not a tenant name"},
		"duplicate tenant":  {"version: 1\ntenants:\n  acme: {}\n  acme: {weight: 2}\n", "p.yaml:4: tenants.acme: duplicate key"},
		"not yaml":          {"version: 1\ntenants: [\n", "p.yaml:"},
		"bad durability":    {"version: 1\ngrants: {durability: disk}\n", `p.yaml:2: grants.durability: "disk": want replica or none`},
		"weight not number": {"version: 1\ntenant_defaults: {weight: heavy}\n", "p.yaml:2: tenant_defaults.weight: want a number"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse("p.yaml", []byte(tc.yaml))
			require.Error(t, err)
			var pe *Error
			require.True(t, errors.As(err, &pe), "%T %v", err, err)
			require.Contains(t, err.Error(), tc.want)
		})
	}
}

func TestKeysOverRuns(t *testing.T) {
	t.Parallel()
	pol, err := Parse("p.yaml", []byte(specPolicy))
	require.NoError(t, err)
	keys := pol.Keys(RunFacts{Kind: "thread", Name: "support/reply", Inputs: map[string]any{"customer_id": "c1"}, Tenant: "acme"})
	require.Equal(t, []Key{{Rule: "per_customer", Value: "c1"}}, keys)
	keys = pol.Keys(RunFacts{Kind: "graph", Name: "review/pr", Inputs: map[string]any{"url": "https://x/y"}, Tenant: "acme"})
	require.Equal(t, []Key{{Rule: "per_repo", Value: "https://x/y"}}, keys, "a fallback")
	keys = pol.Keys(RunFacts{Kind: "thread", Name: "support/reply", Tenant: "acme"})
	require.Equal(t, []Key{{Rule: "per_customer", Value: ""}}, keys, "a missing input never lifts the limit")
	require.Empty(t, pol.Keys(RunFacts{Kind: "thread", Name: "review/pr"}), "graphs' globs are not directives'")
	require.Equal(t, "per_customer=c1", RedisKey("per_customer", "c1"))
	require.Equal(t, "per_repo=https://x/y", RedisKey("per_repo", "https://x/y"))
	require.Regexp(t, `^per_repo=sha256:[0-9a-f]{64}$`, RedisKey("per_repo", "a b"))
	long := make([]byte, 129)
	for i := range long {
		long[i] = 'a'
	}
	require.Regexp(t, `^per_repo=sha256:`, RedisKey("per_repo", string(long)))
}

func TestShares(t *testing.T) {
	t.Parallel()
	d := func(t string, w float64, demand, maxRunning int) Demand {
		return Demand{Tenant: t, Weight: w, Demand: demand, MaxRunning: maxRunning}
	}
	// P1: capacity 16, A backlogged, B newly active with 20: 8 each.
	require.Equal(t, []int{8, 8}, Shares(16, []Demand{d("a", 1, 1000, 0), d("b", 1, 20, 0)}, 0))
	// Weights 3:1.
	require.Equal(t, []int{12, 4}, Shares(16, []Demand{d("a", 3, 1000, 0), d("b", 1, 1000, 0)}, 0))
	// A capped tenant leaves its part to the others (water-filling).
	require.Equal(t, []int{13, 3}, Shares(16, []Demand{d("a", 1, 1000, 0), d("b", 1, 3, 0)}, 0))
	// max_running caps a share even with the fleet idle.
	require.Equal(t, []int{4, 12}, Shares(16, []Demand{d("a", 1, 1000, 4), d("b", 1, 1000, 0)}, 0))
	// Demand below capacity: what is left is shared by weight (work conservation).
	require.Equal(t, []int{8, 8}, Shares(16, []Demand{d("a", 1, 2, 0), d("b", 1, 2, 0)}, 0))
	// Largest remainder, ties taking turns; at least one per tenant with demand.
	got0 := Shares(10, []Demand{d("a", 1, 100, 0), d("b", 1, 100, 0), d("c", 1, 100, 0)}, 0)
	got1 := Shares(10, []Demand{d("a", 1, 100, 0), d("b", 1, 100, 0), d("c", 1, 100, 0)}, 1)
	require.Equal(t, 10, got0[0]+got0[1]+got0[2])
	require.NotEqual(t, got0, got1, "the extra slot rotates")
	require.Equal(t, []int{1, 1, 1}, Shares(2, []Demand{d("a", 1, 9, 0), d("b", 1, 9, 0), d("c", 1, 9, 0)}, 0))
	require.Equal(t, []int{15, 1}, Shares(16, []Demand{d("a", 1000, 1000, 0), d("b", 0.01, 5, 0)}, 0))
}
