// Package ratelimit holds model calls to fleet-wide limits (CLI.md "Rate
// limits"): requests, input tokens and output tokens per minute, and calls
// in flight, per rule of rate_limits.yaml, across every worker, in Redis.
//
// One admission is one Lua script over every rule that matches the call,
// checked together and applied together (all admit it or none is charged):
//
//	requests   GCRA (generic cell rate algorithm): a rule's theoretical
//	           arrival time advances 60s/rpm per request; a request is
//	           admitted while it is at most `burst` intervals ahead of now
//	tokens     GCRA too, with a call's cost its token count: input tokens
//	           are reserved from the context-usage estimate, output tokens
//	           from max_tokens (or the rule's output_estimate); the bucket
//	           holds a minute's budget, so any single call fits
//	concurrent a sorted set of leases, each expiring a lease TTL after its
//	           holder last renewed it (the worker renews while the call
//	           runs): a killed worker's calls free their slots within it
//	blocked    after a provider's 429 with retry-after, every admission to
//	           the rule waits until then: the whole fleet slows, not only
//	           the thread that was refused
//
// After the call, Settle corrects the token reservations to the usage the
// provider reported (GCRA moves the arrival time back for tokens reserved
// and not used, forward for tokens used and not reserved) and releases
// the concurrency lease, so the budgets follow real usage.
//
// A refused admission says how long to wait. Callers that wait on one
// rule are admitted in priority order: a waiting caller registers (the
// rule's "wait" set, scored by its priority, then by when it last asked;
// waiterScore), and a caller is admitted only while no waiter of a higher
// priority is registered; a waiter that stops asking (its worker died) is
// dropped waiterTTL after it last asked, and the set itself expires
// waiterTTL after anyone last asked. Priority is the caller's queue
// weight (a thread of the critical queue before one of default).
//
// Every budget keeps its counters in one Redis hash of fixed fields,
// written by the admission and settlement scripts themselves (no extra
// round trip): calls admitted, admissions refused (by what refused them),
// threads handed back to wait (HandedBack, from the worker), tokens
// reserved and tokens used. Status reads them with each budget's state
// now (requests and tokens in the current minute as GCRA sees them,
// concurrency leases held, waiters, a 429's block): `spool monitor` shows
// them on its rate limits page. The counters of a budget unused for
// statsTTL expire with it.
//
// Why not github.com/go-redis/redis_rate: its GCRA is one script per limit
// and key, so the several rules and kinds of one call would be several
// round trips and could admit a call on one rule and refuse it on the
// next; token settlement and concurrency leases are not in it either.
package ratelimit

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/keyspace"
)

// waiterTTL is how long a waiting caller stays registered without asking
// again.
const waiterTTL = 2 * time.Minute

// A waiter's score in a rule's wait set is exact in a float64 (a sorted
// set's score): (1e6 - priority) × 2^31 + the second it last asked,
// counted from waitEpoch (2^31 seconds: until 2091), so that lower scores
// are higher priorities and the scripts read both parts back exactly.
const (
	waitSpan    = 1 << 31
	waitEpoch   = 1_700_000_000 // unix seconds
	maxPriority = 999_999
)

// waiterScore is the score of a caller of priority p asking at now.
func waiterScore(p int, now time.Time) int64 {
	return int64(1e6-min(max(p, 0), maxPriority))*waitSpan + waiterAt(now)
}

// waiterAt is now as a wait set's time part: seconds since waitEpoch.
func waiterAt(now time.Time) int64 { return now.Unix() - waitEpoch }

// waitSpanLua opens the scripts that read the wait set: waitSpan as span.
var waitSpanLua = "local span = " + strconv.Itoa(waitSpan) + "\n"

// statsTTL is how long a budget's counters outlive its last use.
const statsTTL = 30 * 24 * time.Hour

// concurrencyPoll is how long a caller refused for concurrency waits
// before it asks again (nothing tells it when a slot frees).
const concurrencyPoll = time.Second

// Limiter admits model calls against the rules' budgets in Redis.
type Limiter struct {
	rdb *redisfn.Client
	ks  keyspace.Space
	now func() time.Time
}

// New returns a Limiter over rdb (shared when it is a *redisfn.Client,
// else wrapped in one), its keys built by ks.
func New(rdb redis.UniversalClient, ks keyspace.Space, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{rdb: redisfn.NewClient(rdb), ks: ks, now: now}
}

// Call is what an admission asks for.
type Call struct {
	// Holder names the call (a thread and its activation) for its
	// concurrency lease and its place among the waiters.
	Holder string
	// InputTokens and OutputTokens are the reservation: the context-usage
	// estimate, and max_tokens (or a rule's output_estimate).
	InputTokens, OutputTokens int
	// Priority orders the waiters: higher first.
	Priority int
	// LeaseTTL is how long a concurrency lease lasts without Renew.
	LeaseTTL time.Duration
}

// Admission is the answer to Admit.
type Admission struct {
	OK bool
	// Wait is how long to wait before asking again (refused).
	Wait time.Duration
	// Rule and Kind name what refused it ("req", "in", "out", "conc",
	// "block", "priority").
	Rule, Kind string
	// Reserved are the tokens reserved per rule (for Settle).
	Reserved []Reserved
}

// Reserved is the reservation of one rule.
type Reserved struct {
	Rule    config.RateRule
	In, Out int
}

// budgetKinds are the keys of one budget, in the order of the scripts'
// KEYS.
var budgetKinds = []string{"req", "in", "out", "conc", "block", "wait", "stats"}

// keys are the scripts' KEYS: each rule's budget (KEYS[7i+1..7i+7]), then
// the index of budgets.
func (l *Limiter) keys(rules []config.RateRule) []string {
	keys := make([]string, 0, len(budgetKinds)*len(rules)+1)
	for _, r := range rules {
		for _, k := range budgetKinds {
			keys = append(keys, l.ks.RateLimit(r.ID, k))
		}
	}
	return append(keys, l.ks.RateLimitBudgets())
}

// burst is a rule's request burst: a second's worth by default.
func burst(r config.RateRule) int {
	if r.Burst > 0 {
		return r.Burst
	}
	return max(1, int(math.Ceil(float64(r.RequestsPerMinute)/60)))
}

// admitScript admits a call against every rule, or none (admit.lua).
var admitScript = redisfn.New("rate_admit", waitSpanLua, admitLua)

//go:embed admit.lua
var admitLua string

// Admit asks every rule to admit c. Refused, the Admission says how long
// to wait before asking again (and c is registered as a waiter).
func (l *Limiter) Admit(ctx context.Context, rules []config.RateRule, c Call) (Admission, error) {
	if len(rules) == 0 {
		return Admission{OK: true}, nil
	}
	now := l.now().UnixMilli()
	score := waiterScore(c.Priority, time.UnixMilli(now))
	args := []any{now, c.Holder, max(c.LeaseTTL, time.Second).Milliseconds(), score, waiterTTL.Milliseconds(), statsTTL.Milliseconds()}
	adm := Admission{}
	for _, r := range rules {
		in, out := c.InputTokens, c.OutputTokens
		if r.OutputEstimate > 0 {
			out = r.OutputEstimate
		}
		args = append(args, r.RequestsPerMinute, burst(r), r.InputTokensPerMinute, r.OutputTokensPerMinute, r.Concurrent, in, out, r.ID, r.KeyID)
		adm.Reserved = append(adm.Reserved, Reserved{Rule: r, In: in, Out: out})
	}
	res, err := admitScript.Run(ctx, l.rdb, l.keys(rules), args...).Slice()
	if err != nil {
		return Admission{}, fmt.Errorf("rate limit admission: %w", err)
	}
	if reply.Int(reply.At(res, 0)) == 1 {
		adm.OK = true
		return adm, nil
	}
	wait, i := reply.Int(reply.At(res, 1)), reply.Int(reply.At(res, 2))
	if i < 1 || int(i) > len(rules) {
		return Admission{}, reply.Unexpected("rate limit admission", res)
	}
	adm.Kind = reply.String(reply.At(res, 3))
	adm.Rule = rules[i-1].ID
	adm.Wait = time.Duration(wait) * time.Millisecond
	if wait < 0 {
		adm.Wait = concurrencyPoll
	}
	adm.Reserved = nil
	return adm, nil
}

// settleScript corrects token reservations to actual usage, releases the
// concurrency lease and counts the call settled and its tokens used
// (settle.lua).
var settleScript = redisfn.New("rate_settle", "", settleLua)

//go:embed settle.lua
var settleLua string

// Settle corrects an admission's token reservations to the tokens the
// call used (inUsed, outUsed as the provider reported; 0, 0 for a call
// that failed before using any) and releases its concurrency lease.
func (l *Limiter) Settle(ctx context.Context, adm Admission, holder string, inUsed, outUsed int) error {
	if len(adm.Reserved) == 0 {
		return nil
	}
	rules := make([]config.RateRule, len(adm.Reserved))
	args := []any{l.now().UnixMilli(), holder, statsTTL.Milliseconds()}
	for i, r := range adm.Reserved {
		rules[i] = r.Rule
		args = append(args, r.Rule.InputTokensPerMinute, r.Rule.OutputTokensPerMinute, r.In, inUsed, r.Out, outUsed)
	}
	if err := settleScript.Run(ctx, l.rdb, l.keys(rules), args...).Err(); err != nil {
		return fmt.Errorf("rate limit settlement: %w", err)
	}
	return nil
}

// renewScript extends the holder's concurrency leases (renew.lua).
var renewScript = redisfn.New("rate_renew", "", renewLua)

//go:embed renew.lua
var renewLua string

// Renew extends the concurrency leases of a call in flight by ttl.
func (l *Limiter) Renew(ctx context.Context, adm Admission, holder string, ttl time.Duration) error {
	var keys []string
	for _, r := range adm.Reserved {
		if r.Rule.Concurrent > 0 {
			keys = append(keys, l.ks.RateLimit(r.Rule.ID, "conc"))
		}
	}
	if len(keys) == 0 {
		return nil
	}
	return renewScript.Run(ctx, l.rdb, keys, l.now().Add(ttl).UnixMilli(), holder).Err()
}

// blockScript makes every rule refuse admissions until ARGV[1] (ms),
// unless it already waits longer (block.lua).
var blockScript = redisfn.New("rate_block", "", blockLua)

//go:embed block.lua
var blockLua string

// Block makes the rules refuse every admission for d: a provider answered
// 429 with retry-after d, so the whole fleet waits, not only the thread
// that was refused.
func (l *Limiter) Block(ctx context.Context, rules []config.RateRule, d time.Duration) error {
	if len(rules) == 0 || d <= 0 {
		return nil
	}
	keys := make([]string, len(rules))
	for i, r := range rules {
		keys[i] = l.ks.RateLimit(r.ID, "block")
	}
	now := l.now()
	return blockScript.Run(ctx, l.rdb, keys, now.Add(d).UnixMilli(), now.UnixMilli()).Err()
}
