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
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/config"
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
	rdb redis.Scripter
	ks  keyspace.Space
	now func() time.Time
}

// New returns a Limiter over rdb, its keys built by ks.
func New(rdb redis.Scripter, ks keyspace.Space, now func() time.Time) *Limiter {
	if now == nil {
		now = time.Now
	}
	return &Limiter{rdb: rdb, ks: ks, now: now}
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

// admitScript admits a call against every rule, or none.
//
// KEYS per rule i (0-based): 7i+1 req TAT, 7i+2 in TAT, 7i+3 out TAT,
// 7i+4 concurrency zset, 7i+5 blocked-until, 7i+6 waiters zset, 7i+7
// stats hash; the last KEYS the index of budgets (id → key fingerprint)
// ARGV[1] now (ms), ARGV[2] holder, ARGV[3] lease TTL (ms), ARGV[4] the
// waiter's score (waiterScore), ARGV[5] waiter TTL (ms), ARGV[6] stats
// TTL (ms), then per rule 9 values: rpm, burst, itpm, otpm, concurrent,
// input cost, output cost, budget id, key fingerprint
// Returns {1} when admitted (every rule charged, the lease taken, the
// waiter dropped, admitted and tokens reserved counted); {0, wait ms,
// rule index (1-based), kind} when not (nothing charged; the caller
// registered as a waiter, the refusal counted on the rule that refused).
// Not admitted is an answer, not a refusal (package reply): the script
// wrote the waiter.
var admitScript = redis.NewScript(waitSpanLua + `
local now, holder, ttl, score, wttl, sttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local n = (#KEYS - 1) / 7
local plan = {}
local cutoff = (score % span) - math.floor(wttl / 1000)
local function refuse(k, i, wait, kind)
  redis.call('ZADD', KEYS[k+6], score, holder)
  redis.call('PEXPIRE', KEYS[k+6], wttl)
  redis.call('HINCRBY', KEYS[k+7], 'throttled', 1)
  redis.call('HINCRBY', KEYS[k+7], 'throttled_' .. kind, 1)
  redis.call('PEXPIRE', KEYS[k+7], sttl)
  return {0, wait, i, kind}
end
local function gcra(key, per_min, burst, cost)
  if per_min <= 0 or cost <= 0 then return true, 0, nil end
  local t = 60000 / per_min
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new = tat + cost * t
  local allow_at = new - burst * t
  if allow_at > now then return false, allow_at - now, nil end
  return true, 0, new
end
for i = 1, n do
  local k = 7 * (i - 1)
  local a = 6 + 9 * (i - 1)
  local rpm, burst, itpm, otpm, conc = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4]), tonumber(ARGV[a+5])
  local cin, cout = tonumber(ARGV[a+6]), tonumber(ARGV[a+7])
  local blocked = tonumber(redis.call('GET', KEYS[k+5]) or '0')
  if blocked > now then return refuse(k, i, blocked - now, 'block') end
  -- callers of a higher priority that wait go first; the first waiter
  -- is dropped while it has not asked for the waiter TTL (a few a call)
  local best
  for _ = 1, 16 do
    best = redis.call('ZRANGE', KEYS[k+6], 0, 0, 'WITHSCORES')
    if not best[1] or tonumber(best[2]) % span >= cutoff then break end
    redis.call('ZREM', KEYS[k+6], best[1])
    best = {}
  end
  if best[1] and best[1] ~= holder and math.floor(tonumber(best[2]) / span) < math.floor(score / span) then
    return refuse(k, i, 250, 'priority')
  end
  local ok, wait, r1 = gcra(KEYS[k+1], rpm, burst, 1)
  if not ok then return refuse(k, i, wait, 'req') end
  local ok2, wait2, r2 = gcra(KEYS[k+2], itpm, itpm, math.min(cin, itpm))
  if not ok2 then return refuse(k, i, wait2, 'in') end
  local ok3, wait3, r3 = gcra(KEYS[k+3], otpm, otpm, math.min(cout, otpm))
  if not ok3 then return refuse(k, i, wait3, 'out') end
  if conc > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[k+4], '-inf', now)
    if not redis.call('ZSCORE', KEYS[k+4], holder) and redis.call('ZCARD', KEYS[k+4]) >= conc then
      return refuse(k, i, -1, 'conc')
    end
  end
  plan[i] = {r1, r2, r3, conc, cin, cout, ARGV[a+8], ARGV[a+9]}
end
for i = 1, n do
  local k = 7 * (i - 1)
  local p = plan[i]
  if p[1] then redis.call('SET', KEYS[k+1], p[1], 'PX', math.ceil(p[1] - now) + 1000) end
  if p[2] then redis.call('SET', KEYS[k+2], p[2], 'PX', math.ceil(p[2] - now) + 1000) end
  if p[3] then redis.call('SET', KEYS[k+3], p[3], 'PX', math.ceil(p[3] - now) + 1000) end
  if p[4] > 0 then
    redis.call('ZADD', KEYS[k+4], now + ttl, holder)
    redis.call('PEXPIRE', KEYS[k+4], ttl + 60000)
  end
  redis.call('ZREM', KEYS[k+6], holder)
  redis.call('HINCRBY', KEYS[k+7], 'admitted', 1)
  redis.call('HINCRBY', KEYS[k+7], 'input_reserved', p[5])
  redis.call('HINCRBY', KEYS[k+7], 'output_reserved', p[6])
  redis.call('PEXPIRE', KEYS[k+7], sttl)
  redis.call('HSET', KEYS[#KEYS], p[7], p[8])
end
redis.call('PEXPIRE', KEYS[#KEYS], sttl)
return {1}
`)

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

// settleScript corrects token reservations to actual usage, releases
// the concurrency lease and counts the call settled and its tokens used.
//
// KEYS as admitScript's; ARGV[1] now (ms), ARGV[2] holder, ARGV[3] stats
// TTL (ms), then per rule: itpm, otpm, input reserved, input used, output
// reserved, output used. Returns 1.
var settleScript = redis.NewScript(`
local now, holder, sttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local n = (#KEYS - 1) / 7
local function adjust(key, per_min, delta)
  if per_min <= 0 or delta == 0 then return end
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat == 0 then return end
  tat = tat + delta * 60000 / per_min
  if tat <= now then redis.call('DEL', key); return end
  redis.call('SET', key, tat, 'PX', math.ceil(tat - now) + 1000)
end
for i = 1, n do
  local k = 7 * (i - 1)
  local a = 3 + 6 * (i - 1)
  local itpm, otpm = tonumber(ARGV[a+1]), tonumber(ARGV[a+2])
  adjust(KEYS[k+2], itpm, tonumber(ARGV[a+4]) - tonumber(ARGV[a+3]))
  adjust(KEYS[k+3], otpm, tonumber(ARGV[a+6]) - tonumber(ARGV[a+5]))
  redis.call('ZREM', KEYS[k+4], holder)
  redis.call('HINCRBY', KEYS[k+7], 'settled', 1)
  redis.call('HINCRBY', KEYS[k+7], 'input_used', ARGV[a+4])
  redis.call('HINCRBY', KEYS[k+7], 'output_used', ARGV[a+6])
  redis.call('PEXPIRE', KEYS[k+7], sttl)
end
return 1
`)

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

// renewScript extends the holder's concurrency leases.
//
// KEYS: the rules' concurrency zsets; ARGV[1] expiry (ms), ARGV[2] holder.
var renewScript = redis.NewScript(`
for i = 1, #KEYS do redis.call('ZADD', KEYS[i], 'XX', ARGV[1], ARGV[2]) end
return 1
`)

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
// unless it already waits longer.
var blockScript = redis.NewScript(`
local until_ms = tonumber(ARGV[1])
for i = 1, #KEYS do
  local cur = tonumber(redis.call('GET', KEYS[i]) or '0')
  if until_ms > cur then redis.call('SET', KEYS[i], until_ms, 'PX', math.max(1, until_ms - tonumber(ARGV[2]))) end
end
return 1
`)

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
