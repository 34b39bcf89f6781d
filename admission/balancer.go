package admission

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
)

// idleAfter is how long a tenant with nothing admitted or waiting stays
// among the active tenants.
const idleAfter = time.Minute

// idleScript drops a tenant's active mark when it has nothing admitted or
// waiting (adm_idle.lua).
var idleScript = redisfn.New("adm_idle", "", idleLua)

//go:embed adm_idle.lua
var idleLua string

// Balancer computes the tenants' fair shares (8.2). Every process that
// may run it (workers, the scheduler, `spool dev`) runs one; the one
// holding the lock passes, every fair_share.interval or at once when a
// tenant turns active, and the others wait for the lock.
type Balancer struct {
	a      *Admitter
	owner  string
	passes int
}

// NewBalancer returns the balancer of a's namespace for the process named
// owner (its lock's holder).
func NewBalancer(a *Admitter, owner string) *Balancer { return &Balancer{a: a, owner: owner} }

// Run balances until ctx ends.
func (b *Balancer) Run(ctx context.Context) {
	sub := b.a.rdb.Subscribe(ctx, b.a.ks.AdmWake())
	defer func() { _ = sub.Close() }()
	wakes := sub.Channel()
	for {
		interval := DefaultInterval
		if p := b.a.Policy(); p != nil {
			interval = p.Policy.FairShare.Interval.D()
		}
		t := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-wakes:
			t.Stop()
		case <-t.C:
		}
		if b.a.Policy() == nil || !b.lead(ctx, interval) {
			continue
		}
		if _, err := b.Pass(ctx); err != nil && ctx.Err() == nil {
			b.a.log.Warn("admission: balancer pass failed", "error", err)
		}
	}
}

// lead takes or keeps the balancer's lock for three intervals; it
// reports whether this process holds it.
func (b *Balancer) lead(ctx context.Context, interval time.Duration) bool {
	key := b.a.ks.Lock("admission-balancer")
	ttl := 3 * interval
	ok, err := b.a.rdb.SetNX(ctx, key, b.owner, ttl).Result()
	if err != nil {
		return false
	}
	if ok {
		return true
	}
	holder, err := b.a.rdb.Get(ctx, key).Result()
	if err != nil || holder != b.owner {
		return false
	}
	return b.a.rdb.PExpire(ctx, key, ttl).Err() == nil
}

// tenantLoad is what a pass reads of one tenant.
type tenantLoad struct {
	Demand
	waiting  int64
	lastSeen time.Time
}

// Pass is one balancer pass: capacity from the worker registry, each
// active tenant's demand, the shares (Shares), the pass written
// (adm:balance), and each tenant pumped with its share, its grants
// enqueued. It returns what it wrote.
func (b *Balancer) Pass(ctx context.Context) (*Balance, error) {
	a := b.a
	p := a.Policy()
	if p == nil {
		return nil, nil
	}
	now := a.now()
	capacity, err := Capacity(ctx, a.rdb, a.ks, now)
	if err != nil {
		return nil, err
	}
	loads, err := b.loads(ctx, p)
	if err != nil {
		return nil, err
	}
	var active []Demand
	for _, l := range loads {
		if l.Demand.Demand == 0 && l.waiting == 0 && now.Sub(l.lastSeen) > idleAfter {
			b.dropIdle(ctx, l.Tenant, now)
			continue
		}
		active = append(active, l.Demand)
	}
	b.passes++
	shares := Shares(capacity, active, b.passes)
	bal := &Balance{Capacity: capacity, Weights: map[string]float64{}, Shares: map[string]int{}, At: now}
	for i, d := range active {
		bal.Shares[d.Tenant] = shares[i]
		if d.Demand > 0 {
			bal.Weights[d.Tenant] = d.Weight
		}
	}
	if err := b.write(ctx, bal); err != nil {
		return nil, err
	}
	for i, d := range active {
		share := shares[i]
		// A share that is all the tenant asked for may grow with its
		// demand before the next pass (a newcomer's burst of requests
		// that the pass its first request woke saw only the start of).
		capped := share >= d.Demand && (d.MaxRunning <= 0 || d.Demand < d.MaxRunning)
		if _, err := a.Pump(ctx, d.Tenant, PumpArgs{Share: &share, DemandCapped: capped}); err != nil {
			return bal, err
		}
	}
	return bal, nil
}

// loads reads every active tenant's demand and waiting work.
func (b *Balancer) loads(ctx context.Context, p *Published) ([]tenantLoad, error) {
	a := b.a
	zs, err := a.rdb.ZRangeWithScores(ctx, a.ks.AdmTenants(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read the active tenants: %w", err)
	}
	type reads struct {
		admitted *redis.StringCmd
		ready    *redis.IntCmd
		kwait    *redis.IntCmd
		bq       *redis.IntCmd
		over     *redis.MapStringStringCmd
	}
	pipe := a.rdb.Pipeline()
	rs := make([]reads, len(zs))
	for i, z := range zs {
		t := fmt.Sprint(z.Member)
		rs[i] = reads{admitted: pipe.HGet(ctx, a.ks.AdmTenant(t, "state"), "admitted"), ready: pipe.ZCard(ctx, a.ks.AdmTenant(t, "ready")),
			kwait: pipe.HLen(ctx, a.ks.AdmTenant(t, "kwait")), bq: pipe.ZCard(ctx, a.ks.AdmTenant(t, "bq")),
			over: pipe.HGetAll(ctx, a.ks.AdmTenant(t, "over"))}
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("read the active tenants' state: %w", err)
	}
	out := make([]tenantLoad, len(zs))
	for i, z := range zs {
		t := fmt.Sprint(z.Member)
		admitted, _ := strconv.Atoi(rs[i].admitted.Val())
		s := Effective(p.Policy, t, rs[i].over.Val())
		out[i] = tenantLoad{Demand: Demand{Tenant: t, Weight: s.Weight, MaxRunning: s.MaxRunning, Demand: max(admitted, 0) + int(rs[i].ready.Val())},
			waiting: rs[i].kwait.Val() + rs[i].bq.Val(), lastSeen: time.UnixMilli(int64(z.Score))}
	}
	return out, nil
}

// dropIdle takes tenant off the active tenants unless it turned active
// again meanwhile: it leaves the set first, and its slot's active mark is
// dropped only while it has nothing admitted or waiting (else it is put
// back), so a request between the two finds the mark still set (and the
// tenant is put back) or dropped (and marks it, and adds it, itself).
func (b *Balancer) dropIdle(ctx context.Context, tenant string, now time.Time) {
	a := b.a
	if err := a.rdb.ZRem(ctx, a.ks.AdmTenants(), tenant).Err(); err != nil {
		return
	}
	n, err := idleScript.Run(ctx, a.rdb, a.tenantKeys(tenant)).Int()
	if err != nil || n == 0 {
		_ = a.rdb.ZAdd(ctx, a.ks.AdmTenants(), redis.Z{Score: float64(now.UnixMilli()), Member: tenant}).Err()
	}
}

// write writes the pass (adm:balance).
func (b *Balancer) write(ctx context.Context, bal *Balance) error {
	w, err := json.Marshal(bal.Weights)
	if err != nil {
		return err
	}
	s, err := json.Marshal(bal.Shares)
	if err != nil {
		return err
	}
	err = b.a.rdb.HSet(ctx, b.a.ks.AdmBalance(), "capacity", bal.Capacity, "weights", string(w), "shares", string(s),
		"at", bal.At.UnixMilli()).Err()
	if err != nil {
		return fmt.Errorf("write the balancer's pass: %w", err)
	}
	return nil
}
