package admission

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/spooltype"
)

// nanosPerUSD is how many nano-dollars make a dollar (spend windows are
// kept in nano-dollars). A window is divided by it, not multiplied by
// 1e-9, which no float64 holds exactly: 48,600,000 × 1e-9 reads
// 0.048600000000000004, 48,600,000 / 1e9 reads 0.0486.
const nanosPerUSD = 1e9

// Status is tenant's standing and settings (`spool tenant show`), read
// once: its state, settings, overrides, keys and spend windows, one
// pipeline in its slot. exists is false for a tenant admission has no
// trace of (no state, no override, not listed).
func (a *Admitter) Status(ctx context.Context, tenant string) (*spooltype.Tenant, bool, error) {
	pipe := a.rdb.Pipeline()
	state := pipe.HGetAll(ctx, a.ks.AdmTenant(tenant, "state"))
	over := pipe.HGetAll(ctx, a.ks.AdmTenant(tenant, "over"))
	held := pipe.HGetAll(ctx, a.ks.AdmTenant(tenant, "kheld"))
	wait := pipe.HGetAll(ctx, a.ks.AdmTenant(tenant, "kwait"))
	roots := pipe.SCard(ctx, a.ks.AdmTenant(tenant, "roots"))
	spend := pipe.HGetAll(ctx, a.ks.AdmTenant(tenant, "spend"))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, false, fmt.Errorf("status of tenant %s: %w", tenant, err)
	}
	p := a.Policy()
	var pol *Policy
	if p != nil {
		pol = p.Policy
	}
	st := Effective(pol, tenant, over.Val())
	out := &spooltype.Tenant{Tenant: tenant, Weight: st.Weight, Priority: st.Priority, Blocked: map[string]int{},
		RunsInFlight: int(roots.Val()), Sources: st.Source, Overrides: over.Val(), Keys: keysOf(pol, held.Val(), wait.Val()),
		Limits: limitsOf(st), Spend: spendOf(spend.Val(), st, a.now())}
	counts(out, state.Val(), st.MaxRunning)
	if at, err := strconv.ParseInt(state.Val()["share_at"], 10, 64); err == nil && pol != nil &&
		a.now().UnixMilli()-at <= pol.shareTTL().Milliseconds() {
		out.Share, _ = strconv.Atoi(state.Val()["share"])
	}
	exists := len(state.Val()) > 0 || len(over.Val()) > 0 || (pol != nil && pol.Listed(tenant))
	return out, exists, nil
}

// counts fills t's running, admitted, ready and blocked counts from its
// state hash's per-queue counters: ready are the ready and granted
// activations, unless the tenant is at its max_running, whose ready ones
// then wait for it (tenant_concurrency).
func counts(t *spooltype.Tenant, state map[string]string, maxRunning int) {
	t.Admitted, _ = strconv.Atoi(state["admitted"])
	t.Running, _ = strconv.Atoi(state["running"])
	ready := 0
	for f, v := range state {
		n, _ := strconv.Atoi(v)
		switch where, q := splitCounter(f); {
		case q == "":
		case where == StateReady:
			ready += n
		case where == StateGranted:
			t.Ready += n
		case strings.HasPrefix(where, "blocked:"):
			t.Blocked[strings.TrimPrefix(where, "blocked:")] += n
		}
	}
	if maxRunning > 0 && t.Admitted >= maxRunning {
		t.Blocked[WaitTenantConcurrency] += ready
	} else {
		t.Ready += ready
	}
	for r, n := range t.Blocked {
		if n <= 0 {
			delete(t.Blocked, r) // a reason nothing waits for now
		}
	}
}

// splitCounter splits a state counter n:<where>:<queue> (where may hold
// a colon: blocked:<reason>); q is "" for any other field.
func splitCounter(f string) (where, q string) {
	rest, ok := strings.CutPrefix(f, "n:")
	if !ok {
		return "", ""
	}
	i := strings.LastIndexByte(rest, ':')
	if i < 0 {
		return "", ""
	}
	return rest[:i], rest[i+1:]
}

// keysOf lists the keys with slots held or waiters, by rule and value.
func keysOf(pol *Policy, held, wait map[string]string) []spooltype.TenantKey {
	seen := map[string]bool{}
	out := []spooltype.TenantKey{}
	for _, m := range []map[string]string{held, wait} {
		for k := range m {
			if seen[k] {
				continue
			}
			seen[k] = true
			rule, value, _ := strings.Cut(k, "=")
			running, _ := strconv.Atoi(held[k])
			waiting, _ := strconv.Atoi(wait[k])
			out = append(out, spooltype.TenantKey{Rule: rule, Value: value, Running: running, Max: pol.RuleMax(rule), Waiting: waiting})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rule != out[j].Rule {
			return out[i].Rule < out[j].Rule
		}
		return out[i].Value < out[j].Value
	})
	return out
}

func limitsOf(st Settings) spooltype.TenantLimits {
	l := spooltype.TenantLimits{SpendPerDay: st.SpendPerDay, SpendPerMonth: st.SpendPerMonth, OnExhausted: st.OnExhausted}
	if st.MaxRunning > 0 {
		l.MaxRunning = &st.MaxRunning
	}
	if st.StartsPerMinute > 0 {
		l.StartsPerMinute = &st.StartsPerMinute
	}
	if st.RunsInFlight > 0 {
		l.RunsInFlight = &st.RunsInFlight
	}
	return l
}

// Windows are the spend windows of now: the UTC day and month.
func Windows(now time.Time) (day, month string) {
	u := now.UTC()
	return u.Format("2006-01-02"), u.Format("2006-01")
}

// spendOf is the tenant's spend in the current day and month windows
// (adm:spend's d:<day>:<field> and m:<month>:<field>, nano-dollars):
// spent, held and overrun (what it spent beyond the allowances lent to
// its activations: spend no ceiling could stop).
func spendOf(spend map[string]string, st Settings, now time.Time) map[string]spooltype.TenantSpend {
	day, month := Windows(now)
	window := func(prefix, w string, limit *float64) spooltype.TenantSpend {
		f := func(name string) float64 {
			n, _ := strconv.ParseInt(spend[prefix+w+":"+name], 10, 64)
			return float64(n) / nanosPerUSD
		}
		return spooltype.TenantSpend{Window: w, Spent: f("spent"), Held: f("held"), Limit: limit, Overrun: f("overrun")}
	}
	return map[string]spooltype.TenantSpend{"day": window("d:", day, st.SpendPerDay), "month": window("m:", month, st.SpendPerMonth)}
}

// SetTenant writes tenant's overrides (field → value; cleared fields
// removed) and pumps it in the same script: what the new room lets
// start is granted and enqueued before it returns (how many: granted).
// A field or value that is no setting's is an error naming it, and
// nothing is written.
func (a *Admitter) SetTenant(ctx context.Context, tenant string, set map[string]string, cleared []string) (int, error) {
	if _, err := ParseOverrides(set); err != nil {
		return 0, err
	}
	over := make(map[string]string, len(set)+len(cleared))
	for _, f := range cleared {
		if !knownField(f) {
			return 0, fmt.Errorf("--clear %s: %s", f, UnknownSetting(f))
		}
		over[f] = ""
	}
	for f, v := range set {
		over[f] = v
	}
	if len(over) == 0 {
		return 0, nil
	}
	return a.Pump(ctx, tenant, PumpArgs{Overrides: over})
}

func knownField(f string) bool {
	for _, k := range Fields {
		if k == f {
			return true
		}
	}
	return false
}
