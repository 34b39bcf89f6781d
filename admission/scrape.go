package admission

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/spooltype"
)

// WaitBuckets are the upper bounds (seconds) of the wait histogram the
// tenant scripts keep (admission.lua's BUCKETS; the last bucket, +Inf,
// is implied).
var WaitBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}

// Scrape is the fleet's admission as metrics read it (14.1): the
// capacity and each known tenant's counts.
type Scrape struct {
	Capacity int
	Tenants  []TenantScrape
}

// QueueReason names a per-queue count of blocked activations.
type QueueReason struct{ Queue, Reason string }

// Histogram is a cumulative histogram: Counts[i] observations ≤
// WaitBuckets[i], Count in all, Sum of their values.
type Histogram struct {
	Counts []uint64
	Count  uint64
	Sum    float64
}

// TenantScrape is one tenant's counts.
type TenantScrape struct {
	Tenant string
	// Share is 0 while none is fresh.
	Share   int
	Ready   map[string]int // by queue: ready and granted, waiting for a worker slot
	Running map[string]int // by queue
	Blocked map[QueueReason]int
	Wait    map[string]Histogram // by reason
	Grants  int
	// Reaped by the state the grant was in (granted: never claimed;
	// running: its worker died).
	Reaped       map[string]int
	Refusals     map[string]int // by code
	Unreplicated int
	Fenced       int
	// Spend are its spend windows of now, "day" and "month" (as
	// Status has them), and Overrun what was spent in each beyond the
	// allowances lent (spend a ceiling could not stop).
	Spend   map[string]spooltype.TenantSpend
	Overrun map[string]float64
}

// Scrape reads the capacity and every known tenant's state hash, once.
func (a *Admitter) Scrape(ctx context.Context) (*Scrape, error) {
	capacity, err := Capacity(ctx, a.rdb, a.ks, a.now())
	if err != nil {
		return nil, err
	}
	tenants, err := a.KnownTenants(ctx)
	if err != nil {
		return nil, err
	}
	pipe := a.rdb.Pipeline()
	states := make([]*redis.MapStringStringCmd, len(tenants))
	overs := make([]*redis.MapStringStringCmd, len(tenants))
	spends := make([]*redis.MapStringStringCmd, len(tenants))
	for i, t := range tenants {
		states[i] = pipe.HGetAll(ctx, a.ks.AdmTenant(t, "state"))
		overs[i] = pipe.HGetAll(ctx, a.ks.AdmTenant(t, "over"))
		spends[i] = pipe.HGetAll(ctx, a.ks.AdmTenant(t, "spend"))
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("scrape admission: %w", err)
	}
	var pol *Policy
	if p := a.Policy(); p != nil {
		pol = p.Policy
	}
	out := &Scrape{Capacity: capacity}
	now := a.now()
	for i, t := range tenants {
		st := Effective(pol, t, overs[i].Val())
		ts := a.tenantScrape(t, states[i].Val(), st.MaxRunning)
		ts.Spend = spendOf(spends[i].Val(), st, now)
		ts.Overrun = map[string]float64{"day": ts.Spend["day"].Overrun, "month": ts.Spend["month"].Overrun}
		out.Tenants = append(out.Tenants, ts)
	}
	return out, nil
}

// tenantScrape reads one tenant's state hash: the per-queue counts (its
// ready ones blocked on tenant_concurrency while it is at max_running),
// the wait histogram, the totals.
func (a *Admitter) tenantScrape(tenant string, state map[string]string, maxRunning int) TenantScrape {
	ts := TenantScrape{Tenant: tenant, Ready: map[string]int{}, Running: map[string]int{}, Blocked: map[QueueReason]int{},
		Wait: map[string]Histogram{}, Reaped: map[string]int{}, Refusals: map[string]int{}}
	n := func(f string) int { v, _ := strconv.Atoi(state[f]); return v }
	admitted := n("admitted")
	full := maxRunning > 0 && admitted >= maxRunning
	ts.Grants, ts.Unreplicated, ts.Fenced = n("grants"), n("unreplicated"), n("fenced")
	if p := a.Policy(); p != nil {
		if at, err := strconv.ParseInt(state["share_at"], 10, 64); err == nil && a.now().UnixMilli()-at <= p.Policy.shareTTL().Milliseconds() {
			ts.Share = n("share")
		}
	}
	buckets := map[string][]uint64{}
	for f, v := range state {
		x, _ := strconv.Atoi(v)
		switch {
		case strings.HasPrefix(f, "n:"):
			ts.count(f, x, full)
		case strings.HasPrefix(f, "reaped:"):
			ts.Reaped[strings.TrimPrefix(f, "reaped:")] = x
		case strings.HasPrefix(f, "refused:"):
			ts.Refusals[strings.TrimPrefix(f, "refused:")] = x
		case strings.HasPrefix(f, "wh:"):
			addWaitBucket(buckets, strings.TrimPrefix(f, "wh:"), x)
		}
	}
	for reason, bs := range buckets {
		ts.Wait[reason] = waitHistogram(bs, state["ws:"+reason])
	}
	return ts
}

// addWaitBucket adds the count x of a wait histogram's field
// wh:<reason>:<bucket> (its bucket counted from 1, the last one past
// every WaitBuckets bound) to buckets[reason]; a bucket out of range is
// skipped.
func addWaitBucket(buckets map[string][]uint64, field string, x int) {
	reason, b, _ := strings.Cut(field, ":")
	i, err := strconv.Atoi(b)
	if err != nil || i < 1 || i > len(WaitBuckets)+1 {
		return
	}
	if buckets[reason] == nil {
		buckets[reason] = make([]uint64, len(WaitBuckets)+1)
	}
	buckets[reason][i-1] += uint64(max(x, 0))
}

// waitHistogram is one reason's wait histogram from its per-bucket counts
// bs (addWaitBucket) and its sum of seconds (the ws:<reason> field):
// cumulative counts, as Prometheus has them.
func waitHistogram(bs []uint64, sum string) Histogram {
	h := Histogram{Counts: make([]uint64, len(WaitBuckets))}
	var cum uint64
	for i, c := range bs {
		cum += c
		if i < len(WaitBuckets) {
			h.Counts[i] = cum
		}
	}
	h.Count = cum
	h.Sum, _ = strconv.ParseFloat(sum, 64)
	return h
}

// count adds one per-queue counter n:<where>:<queue> to ts.
func (ts *TenantScrape) count(f string, n int, full bool) {
	where, q := splitCounter(f)
	switch {
	case q == "":
	case where == StateReady && full:
		ts.Blocked[QueueReason{q, WaitTenantConcurrency}] += n
	case where == StateReady || where == StateGranted:
		ts.Ready[q] += n
	case where == StateRunning:
		ts.Running[q] += n
	case strings.HasPrefix(where, "blocked:"):
		ts.Blocked[QueueReason{q, strings.TrimPrefix(where, "blocked:")}] += n
	}
}
