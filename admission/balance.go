package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/keyspace"
)

// balanceTTL is how long a process keeps what it read of the balancer's
// last pass (8.2: cached ≤ 1 s).
const balanceTTL = time.Second

// balanceCache is the balancer's last pass as this process read it: the
// capacity and the active tenants' weights, and the provisional shares
// computed from them.
type balanceCache struct {
	mu       sync.Mutex
	read     time.Time
	capacity int
	weights  map[string]float64
	prov     map[string]int
}

// provisional is the share a tenant takes while no fresh share of the
// balancer's is in its slot (a tenant that turned active since the last
// pass, or a fleet whose balancer stopped): max(1, ⌊C·w / (w + W)⌋), W
// the weights of the other tenants active at the last pass.
func (a *Admitter) provisional(ctx context.Context, p *Published, tenant string) int {
	if p == nil || p.Policy == nil {
		return 1
	}
	b := &a.bal
	b.mu.Lock()
	defer b.mu.Unlock()
	if time.Since(b.read) > balanceTTL {
		a.readBalance(ctx, b)
	}
	if s, ok := b.prov[tenant]; ok {
		return s
	}
	w := p.weight(tenant)
	others := 0.0
	for t, tw := range b.weights {
		if t != tenant {
			others += tw
		}
	}
	s := partOf(b.capacity, w, w+others)
	b.prov[tenant] = s
	return s
}

// partOf is a provisional share: max(1, ⌊capacity·w / total⌋), total the
// weights of the tenants it is shared with, w's included.
func partOf(capacity int, w, total float64) int {
	return max(1, int(math.Floor(float64(capacity)*w/total)))
}

// readBalance reads the balancer's last pass into b (the worker registry's
// capacity when there was none); a failed read keeps what b had.
func (a *Admitter) readBalance(ctx context.Context, b *balanceCache) {
	b.read = time.Now()
	b.prov = map[string]int{}
	m, err := a.rdb.HGetAll(ctx, a.ks.AdmBalance()).Result()
	if err != nil {
		return
	}
	if c, err := strconv.Atoi(m["capacity"]); err == nil {
		b.capacity = c
		b.weights = map[string]float64{}
		_ = json.Unmarshal([]byte(m["weights"]), &b.weights)
		return
	}
	if c, err := Capacity(ctx, a.rdb, a.ks, a.now()); err == nil {
		b.capacity, b.weights = c, nil
	}
}

// weight is tenant's weight under the policy (overrides aside: the
// balancer reads them), made once per tenant.
func (p *Published) weight(tenant string) float64 {
	if w, ok := p.weights.Load(tenant); ok {
		return w.(float64)
	}
	w := Effective(p.Policy, tenant, nil).Weight
	p.weights.Store(tenant, w)
	return w
}

// activated tells the fleet that tenant turned active: it joins the
// active tenants and wakes the balancer. Best effort: the worker registry
// names the tenants its workers run every few seconds too.
func (a *Admitter) activated(ctx context.Context, p *Published, tenant string) {
	ctx = context.WithoutCancel(ctx)
	pipe := a.rdb.Pipeline()
	pipe.ZAdd(ctx, a.ks.AdmTenants(), redis.Z{Score: float64(a.now().UnixMilli()), Member: tenant})
	pipe.Publish(ctx, a.ks.AdmWake(), tenant)
	if _, err := pipe.Exec(ctx); err != nil {
		a.log.Warn("admission: active tenant not recorded", "tenant", tenant, "error", err)
	}
	a.makeRoom(ctx, p, tenant)
}

// makeRoom gives a newcomer its provisional share at once: each tenant of
// the balancer's last pass whose share is above ⌊C·w / (W + w_new)⌋ (W
// the weights of that pass, w_new the newcomer's) is lowered to it until
// the pass the newcomer woke writes the shares again. Without it the
// tenants already running keep granting their own next activations
// until that pass (a few hundred ms on a loaded fleet, tens of starts),
// and those grants sit in the queues beside the newcomer's. Best effort:
// the pass follows anyway.
func (a *Admitter) makeRoom(ctx context.Context, p *Published, tenant string) {
	bal, err := ReadBalance(ctx, a.rdb, a.ks)
	if err != nil || bal == nil || bal.Capacity == 0 {
		return
	}
	if _, known := bal.Weights[tenant]; known {
		return
	}
	total := p.weight(tenant)
	for _, w := range bal.Weights {
		total += w
	}
	for other, share := range bal.Shares {
		w, ok := bal.Weights[other]
		if other == tenant || !ok {
			continue
		}
		most := partOf(bal.Capacity, w, total)
		if share <= most {
			continue
		}
		if _, err := a.Pump(ctx, other, PumpArgs{ShareAtMost: &most}); err != nil {
			a.log.Warn("admission: a running tenant's share not lowered for a newcomer", "tenant", other, "newcomer", tenant, "error", err)
		}
	}
}

// Touch records tenants as active now (the worker registry's heartbeat
// names the tenants its activations run for).
func Touch(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, now time.Time, tenants []string) error {
	if len(tenants) == 0 {
		return nil
	}
	zs := make([]redis.Z, len(tenants))
	for i, t := range tenants {
		zs[i] = redis.Z{Score: float64(now.UnixMilli()), Member: t}
	}
	return rdb.ZAdd(ctx, ks.AdmTenants(), zs...).Err()
}

// WorkerInfo is a live worker in the worker registry.
type WorkerInfo struct {
	Concurrency int      `json:"concurrency"`
	Queues      []string `json:"queues,omitempty"`
	// Expires is when the entry lapses unless renewed (unix ms).
	Expires int64 `json:"expires"`
}

// Worker registry timing (8.2): a worker registers every RegisterEvery,
// and an entry not renewed for WorkerTTL is dead.
const (
	RegisterEvery = 5 * time.Second
	WorkerTTL     = 15 * time.Second
)

// Register registers (or renews) worker id with its concurrency and
// queues until WorkerTTL from now.
func Register(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, id string, concurrency int, queues []string, now time.Time) error {
	b, err := json.Marshal(WorkerInfo{Concurrency: concurrency, Queues: queues, Expires: now.Add(WorkerTTL).UnixMilli()})
	if err != nil {
		return err
	}
	return rdb.HSet(ctx, ks.AdmWorkers(), id, string(b)).Err()
}

// Deregister removes worker id (a worker stopping on SIGTERM).
func Deregister(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, id string) error {
	return rdb.HDel(ctx, ks.AdmWorkers(), id).Err()
}

// Workers lists the live workers, and deletes the entries of dead ones.
func Workers(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, now time.Time) (map[string]WorkerInfo, error) {
	m, err := rdb.HGetAll(ctx, ks.AdmWorkers()).Result()
	if err != nil {
		return nil, fmt.Errorf("read the worker registry: %w", err)
	}
	out := map[string]WorkerInfo{}
	var dead []string
	for id, s := range m {
		var w WorkerInfo
		if json.Unmarshal([]byte(s), &w) != nil || w.Expires <= now.UnixMilli() {
			dead = append(dead, id)
			continue
		}
		out[id] = w
	}
	if len(dead) > 0 {
		_ = rdb.HDel(ctx, ks.AdmWorkers(), dead...).Err()
	}
	return out, nil
}

// Capacity is the sum of the live workers' concurrency.
func Capacity(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, now time.Time) (int, error) {
	ws, err := Workers(ctx, rdb, ks, now)
	if err != nil {
		return 0, err
	}
	c := 0
	for _, w := range ws {
		c += w.Concurrency
	}
	return c, nil
}

// Balance is the balancer's last pass as kept in Redis.
type Balance struct {
	Capacity int                `json:"capacity"`
	Weights  map[string]float64 `json:"weights"`
	Shares   map[string]int     `json:"shares"`
	At       time.Time          `json:"at"`
}

// ReadBalance reads the balancer's last pass; nil when there was none.
func ReadBalance(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space) (*Balance, error) {
	m, err := rdb.HGetAll(ctx, ks.AdmBalance()).Result()
	if err != nil {
		return nil, err
	}
	c, err := strconv.Atoi(m["capacity"])
	if err != nil {
		return nil, nil
	}
	b := &Balance{Capacity: c}
	_ = json.Unmarshal([]byte(m["weights"]), &b.Weights)
	_ = json.Unmarshal([]byte(m["shares"]), &b.Shares)
	if ms, err := strconv.ParseInt(m["at"], 10, 64); err == nil {
		b.At = time.UnixMilli(ms)
	}
	return b, nil
}
