package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
)

// Kinds are what may refuse an admission (Admission.Kind), in the order
// the admission script checks them.
var Kinds = []string{"block", "priority", "req", "in", "out", "conc"}

// Counters are a budget's counts across the fleet since its counters were
// created (they expire statsTTL after the budget's last use).
type Counters struct {
	// Admitted is the calls admitted; Settled, those settled since.
	Admitted int64 `json:"admitted"`
	Settled  int64 `json:"settled"`
	// Throttled is the admissions refused, ThrottledBy the same by what
	// refused them (Kinds). A caller that waits in its slot asks again:
	// each refusal counts.
	Throttled   int64            `json:"throttled"`
	ThrottledBy map[string]int64 `json:"throttled_by,omitempty"`
	// Waiting is the threads handed back to wait for the budget (no slot
	// held), counted by HandedBack.
	Waiting int64 `json:"waiting"`
	// Tokens reserved at admission and used as the providers reported at
	// settlement.
	InputReserved  int64 `json:"input_reserved"`
	InputUsed      int64 `json:"input_used"`
	OutputReserved int64 `json:"output_reserved"`
	OutputUsed     int64 `json:"output_used"`
}

// Status is one budget of a rule: its limits (Rule), its state now and
// its counters.
type Status struct {
	// Rule is the rule, with the budget's ID (and KeyID for a per_key
	// rule). A per_key rule no call has used yet has one Status with an
	// empty ID.
	Rule config.RateRule `json:"rule"`
	// Requests, InputTokens and OutputTokens are what the current minute
	// holds as GCRA sees it (the time its arrivals are ahead of now, in
	// units of the limit); 0 for a kind the rule does not limit. Tokens
	// used beyond their reservation may take them past the limit (a debt
	// the next calls wait for).
	Requests     float64 `json:"requests"`
	InputTokens  float64 `json:"input_tokens"`
	OutputTokens float64 `json:"output_tokens"`
	// InFlight is the concurrency leases held (unexpired).
	InFlight int64 `json:"in_flight"`
	// Waiters is the callers registered as waiting now (in their slot or
	// handed back), at most 1000 counted.
	Waiters int64 `json:"waiters"`
	// BlockedUntil is when a provider's 429 stops blocking the budget;
	// zero when it does not.
	BlockedUntil time.Time `json:"blocked_until,omitzero"`
	Counters     Counters  `json:"counters"`
}

// handedBackScript counts a thread handed back to wait for a budget
// (handed_back.lua).
var handedBackScript = redisfn.New("rate_handed_back", "", handedBackLua)

//go:embed handed_back.lua
var handedBackLua string

// HandedBack counts a thread handed back (no slot held) to wait for the
// budget of rule id (Admission.Rule) in its counters.
func (l *Limiter) HandedBack(ctx context.Context, rule string) error {
	if err := handedBackScript.Run(ctx, l.rdb, []string{l.ks.RateLimit(rule, "stats")}, statsTTL.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("count a thread waiting for rate limit %s: %w", rule, err)
	}
	return nil
}

// statusScript reads budgets' state and counters, writing nothing
// (status.lua).
var statusScript = redisfn.New("rate_status", waitSpanLua, statusLua)

//go:embed status.lua
var statusLua string

// Status returns, for every rule of rl, the state and counters of each of
// its budgets: one per rule, or for a per_key rule one per API key the
// fleet has used it with.
func (l *Limiter) Status(ctx context.Context, rl *config.RateLimits) ([]Status, error) {
	if rl == nil || len(rl.Rules) == 0 {
		return nil, nil
	}
	rules, err := l.statusRules(ctx, rl)
	if err != nil {
		return nil, err
	}
	var read []config.RateRule // the rules with a budget
	for _, r := range rules {
		if r.ID != "" {
			read = append(read, r)
		}
	}
	now := l.now()
	res, err := statusScript.Run(ctx, l.rdb, l.keys(read), now.UnixMilli(), waiterAt(now.Add(-waiterTTL))).Slice()
	if err != nil {
		return nil, fmt.Errorf("rate limit status: %w", err)
	}
	if len(res) != len(read) {
		return nil, reply.Unexpected("rate limit status", res)
	}
	out := make([]Status, 0, len(rules))
	for _, r := range rules {
		st := Status{Rule: r}
		if r.ID != "" {
			st.read(reply.Array(res[0]), now)
			res = res[1:]
		}
		out = append(out, st)
	}
	return out, nil
}

// statusRules are the rules of rl as Status reports them: a rule with its
// budget's id, a per_key rule once for each API key it has a budget of
// (keyedRules). The index of budgets is read only for a per_key rule.
func (l *Limiter) statusRules(ctx context.Context, rl *config.RateLimits) ([]config.RateRule, error) {
	var budgets map[string]string // id → key fingerprint
	var rules []config.RateRule
	for _, r := range rl.Rules {
		if !r.PerKey {
			r.ID = r.BudgetID("")
			rules = append(rules, r)
			continue
		}
		if budgets == nil {
			var err error
			if budgets, err = l.budgets(ctx); err != nil {
				return nil, err
			}
		}
		rules = append(rules, keyedRules(r, budgets)...)
	}
	return rules, nil
}

// keyedRules are the per_key rule r once for each API key the fleet has
// used it with, as budgets (id → key fingerprint) names them, with the
// budget's id and the key's fingerprint, in the order of the ids; r
// itself, without a budget, when there is none.
func keyedRules(r config.RateRule, budgets map[string]string) []config.RateRule {
	var rules []config.RateRule
	for _, id := range slices.Sorted(maps.Keys(budgets)) {
		if key := budgets[id]; r.BudgetID(key) == id {
			k := r
			k.ID, k.KeyID = id, key
			rules = append(rules, k)
		}
	}
	if len(rules) == 0 {
		return []config.RateRule{r}
	}
	return rules
}

// budgets reads the index of budgets: id → key fingerprint.
func (l *Limiter) budgets(ctx context.Context) (map[string]string, error) {
	m, err := l.rdb.HGetAll(ctx, l.ks.RateLimitBudgets()).Result()
	if err != nil {
		return nil, fmt.Errorf("rate limit budgets: %w", err)
	}
	return m, nil
}

// read fills st from one budget of statusScript's reply.
func (st *Status) read(v []any, now time.Time) {
	ms := float64(now.UnixMilli())
	ahead := func(i int, perMin int) float64 {
		tat, err := strconv.ParseFloat(reply.String(reply.At(v, i)), 64)
		if err != nil || perMin <= 0 || tat <= ms {
			return 0
		}
		return (tat - ms) * float64(perMin) / 60000
	}
	r := st.Rule
	st.Requests = ahead(0, r.RequestsPerMinute)
	st.InputTokens = ahead(1, r.InputTokensPerMinute)
	st.OutputTokens = ahead(2, r.OutputTokensPerMinute)
	st.InFlight = reply.Int(reply.At(v, 3))
	st.Waiters = reply.Int(reply.At(v, 4))
	if until := reply.Int(reply.At(v, 5)); until > now.UnixMilli() {
		st.BlockedUntil = time.UnixMilli(until).UTC()
	}
	c := &st.Counters
	fields := map[string]*int64{"admitted": &c.Admitted, "settled": &c.Settled, "throttled": &c.Throttled, "waiting": &c.Waiting,
		"input_reserved": &c.InputReserved, "input_used": &c.InputUsed, "output_reserved": &c.OutputReserved, "output_used": &c.OutputUsed}
	f := reply.Strings(reply.At(v, 6))
	for i := 0; i+1 < len(f); i += 2 {
		n, _ := strconv.ParseInt(f[i+1], 10, 64)
		if p, ok := fields[f[i]]; ok {
			*p = n
		} else if kind, ok := strings.CutPrefix(f[i], "throttled_"); ok {
			if c.ThrottledBy == nil {
				c.ThrottledBy = map[string]int64{}
			}
			c.ThrottledBy[kind] = n
		}
	}
}
