package admission

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/queue"
)

// Lua is admission.lua, the library of the tenant scripts: the prelude
// of each, and of a registry script that fuses a tenant step.
//
//go:embed admission.lua
var Lua string

var (
	//go:embed adm_request.lua
	requestLua string
	//go:embed adm_claim.lua
	claimLua string
	//go:embed adm_release.lua
	releaseLua string
	//go:embed adm_renew.lua
	renewLua string
	//go:embed adm_pump.lua
	pumpLua string
	//go:embed adm_cancel.lua
	cancelLua string
	//go:embed adm_drain.lua
	drainLua string
	//go:embed adm_where.lua
	whereLua string
	//go:embed adm_topup.lua
	topupLua string
	//go:embed adm_settle.lua
	settleLua string

	requestScript = redisfn.New("adm_request", Lua, requestLua)
	claimScript   = redisfn.New("adm_claim", Lua, claimLua)
	releaseScript = redisfn.New("adm_release", Lua, releaseLua)
	renewScript   = redisfn.New("adm_renew", Lua, renewLua)
	pumpScript    = redisfn.New("adm_pump", Lua, pumpLua)
	cancelScript  = redisfn.New("adm_cancel", Lua, cancelLua)
	drainScript   = redisfn.New("adm_drain", Lua, drainLua)
	whereScript   = redisfn.New("adm_where", Lua, whereLua)
	topupScript   = redisfn.New("adm_topup", Lua, topupLua)
	settleScript  = redisfn.New("adm_settle", Lua, settleLua)
)

// How many grants one call makes at most: a request, claim, release or
// renewal frees or asks for a slot or a few; a pump may fill a share.
const (
	grantsPerCall = 16
	grantsPerPump = 64
)

// Activation states in the tenant's slot (Entry.State).
const (
	StateReady   = "ready"   // in the ready queue: waits for its tenant's share
	StateKey     = "key"     // in a key's queue: waits for a slot of the key
	StateBlocked = "blocked" // in the ceiling queue: waits for a tenant ceiling
	StateGranted = "granted" // admitted and enqueued, not claimed yet
	StateRunning = "running" // claimed: a worker runs it
)

// What a parked activation waits for (its record's waiting_for).
const (
	WaitCapacity          = "capacity"
	WaitConcurrency       = "concurrency"
	WaitTenantConcurrency = "tenant_concurrency"
	WaitTenantBudget      = "tenant_budget"
	WaitTenantRate        = "tenant_rate"
	WaitTenantRuns        = "tenant_runs"
)

// WaitReasons are every reason an activation waits for admission.
var WaitReasons = []string{WaitCapacity, WaitConcurrency, WaitTenantConcurrency, WaitTenantBudget, WaitTenantRate, WaitTenantRuns}

// Request is what admission needs of one activation; its JSON is the
// record admission.lua keeps (with the fields of Entry).
type Request struct {
	Act    string `json:"-"` // the activation id (queue.ActivationID)
	Tenant string `json:"-"`
	Run    string `json:"run"`
	// Root is the run's root chain (the first thread of its tree's root).
	Root     string `json:"root,omitempty"`
	Queue    string `json:"q"`
	Priority int    `json:"p"`
	// Class is 1 for a root chain's first activation, 0 for any other
	// (a tree already started goes first at equal priority).
	Class int `json:"c"`
	// Child: the run is a child (under on_exhausted: refuse its start
	// is refused when a spend window is full).
	Child bool `json:"ch,omitempty"`
	// Keys are the run's concurrency keys (RedisKey), Maxes their rules'
	// maxes when requested (the published max wins at each grant).
	Keys  []string `json:"k,omitempty"`
	Maxes []int    `json:"m,omitempty"`
	// Reason and Seq are the activation's task's (queue.Activation).
	Reason string `json:"r"`
	Seq    int64  `json:"s"`
}

// Entry is an activation's record in its tenant's slot.
type Entry struct {
	Request
	State string `json:"st"`
	// Why is what it waits or last waited for; WaitKey the key whose
	// queue it is in.
	Why     string `json:"why,omitempty"`
	WaitKey string `json:"wk,omitempty"`
	Arrival int64  `json:"ar"`
	// RequestedAt and GrantedAt are unix ms.
	RequestedAt int64 `json:"rq"`
	GrantedAt   int64 `json:"ga,omitempty"`
	// Epoch counts the tasks a worker took and parked (queue.Activation).
	Epoch int `json:"e"`
	// Gen is the tenant's generation at its grant; Holder the token of
	// the activation running it.
	Gen    int64  `json:"g,omitempty"`
	Holder string `json:"w,omitempty"`
	// Allowance is what a running activation holds of its spend
	// windows (nano-dollars), Windows those windows (the day's and the
	// month's at its claim); none while the tenant has no spend limit.
	Allowance int64    `json:"al,omitempty"`
	Windows   []string `json:"aw,omitempty"`
}

// Grant is an activation admitted and to be enqueued.
type Grant struct {
	Act    string
	Tenant string
	Entry  Entry
}

// Task is the grant's asynq activation (its seq is Entry.Seq).
func (g Grant) Task() queue.Activation {
	e := g.Entry
	r := e.Request
	r.Tenant = g.Tenant
	return queue.Activation{ThreadID: e.Run, Reason: e.Reason, Epoch: e.Epoch, Ticket: r.Ticket(e.Gen)}
}

// Decision is what a request decided for its activation.
type Decision struct {
	// State is StateGranted, StateRunning (a repeated request of a
	// claimed activation) or, parked, StateReady, StateKey or
	// StateBlocked.
	Granted bool
	Parked  bool
	// WaitingFor and WaitKey say why a parked activation waits.
	WaitingFor, WaitKey string
	// Activated: the tenant had no demand before this request.
	Activated bool
	Gen       int64
	// Refused: under on_exhausted: refuse, a root chain's first
	// activation met the ceiling WaitingFor (Refusal names its code);
	// RetryAt is when the ceiling has room again (zero: unknown).
	Refused bool
	RetryAt time.Time
}

// Admitter admits activations: the tenant scripts on Redis, the policy
// as this process last read it (Watcher), and the enqueuer of what the
// scripts grant.
type Admitter struct {
	rdb  *redisfn.Client
	ks   keyspace.Space
	now  func() time.Time
	pol  *Watcher
	enq  *queue.Enqueuer
	log  *slog.Logger
	keys sync.Map // tenant → []string
	bal  balanceCache
	wait *replication
	insp *asynq.Inspector
}

// Config is what an Admitter runs on.
type Config struct {
	Redis    redis.UniversalClient
	Keys     keyspace.Space
	Now      func() time.Time // the fleet clock (default time.Now)
	Policy   *Watcher
	Enqueuer *queue.Enqueuer
	Logger   *slog.Logger
}

// New returns an Admitter.
func New(cfg Config) *Admitter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rdb := redisfn.NewClient(cfg.Redis)
	return &Admitter{rdb: rdb, ks: cfg.Keys, now: cfg.Now, pol: cfg.Policy, enq: cfg.Enqueuer, log: cfg.Logger,
		wait: newReplication(), insp: asynq.NewInspectorFromRedisClient(cfg.Redis)}
}

// Policy is the published policy this process read last; nil while
// admission is off. Every caller on the hot path tests it first: off,
// admission costs this one load.
func (a *Admitter) Policy() *Published {
	if a == nil || a.pol == nil {
		return nil
	}
	return a.pol.Current()
}

// Watcher is the Admitter's policy watcher.
func (a *Admitter) Watcher() *Watcher { return a.pol }

// Keys is the key space.
func (a *Admitter) Keys() keyspace.Space { return a.ks }

// tenantKeys are tenant's script keys, made once per tenant.
func (a *Admitter) tenantKeys(tenant string) []string {
	if k, ok := a.keys.Load(tenant); ok {
		return k.([]string)
	}
	k := a.ks.AdmTenantKeys(tenant)
	a.keys.Store(tenant, k)
	return k
}

// head is every tenant script's ARGV[1..4]: now (ms), the policy's
// version, its settings of tenant, the provisional share.
func (a *Admitter) head(ctx context.Context, p *Published, tenant string) []any {
	var pv int64
	conf := ""
	if p != nil && p.Policy != nil {
		pv, conf = p.Version, p.conf(tenant)
	}
	return []any{a.now().UnixMilli(), pv, conf, a.provisional(ctx, p, tenant)}
}

// run runs a granting script of tenant: with the replication wait of
// grants.durability: replica (12.3) when the policy asks for it.
func (a *Admitter) run(ctx context.Context, s *redisfn.Script, p *Published, tenant string, args ...any) ([]any, error) {
	keys := a.tenantKeys(tenant)
	if p != nil && p.Policy != nil && p.Policy.Grants.Durability == DurabilityReplica {
		return a.wait.run(ctx, a, s, tenant, keys, args)
	}
	return s.Run(ctx, a.rdb, keys, args...).Slice()
}

// Request asks admission for activation req, before it is enqueued
// (10.1): it is granted (and enqueued, with every other grant the call
// made) or parked. A repeated request of an activation reads where the
// first one stands.
func (a *Admitter) Request(ctx context.Context, req Request) (Decision, error) {
	p := a.Policy()
	if p == nil {
		return Decision{Granted: true}, nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Decision{}, err
	}
	args := append(a.head(ctx, p, req.Tenant), req.Act, string(body), grantsPerCall)
	res, err := a.run(ctx, requestScript, p, req.Tenant, args...)
	if err != nil {
		return Decision{}, fmt.Errorf("admission request %s: %w", req.Act, err)
	}
	if len(res) < 6 {
		return Decision{}, reply.Unexpected("adm_request", res)
	}
	st := reply.String(res[0])
	d := Decision{Granted: st == "GRANTED" || st == "RUNNING", Parked: st == "PARKED", Refused: st == "REFUSED",
		WaitingFor: reply.String(res[1]), WaitKey: reply.String(res[2]), Activated: reply.Int(res[3]) == 1, Gen: reply.Int(res[4])}
	if d.Refused && reply.Int(res[5]) > 0 {
		d.RetryAt = time.UnixMilli(reply.Int(res[5]))
	}
	if d.Activated {
		a.activated(ctx, p, req.Tenant)
	}
	if d.Refused {
		return d, a.enqueue(ctx, req.Tenant, res[6:])
	}
	return d, a.after(ctx, req.Tenant, res[5:])
}

// ClaimVerdict is what a claim decided.
type ClaimVerdict int

const (
	// ClaimRun is a claim that holds a running lease: the activation holds a running lease; run it.
	ClaimRun ClaimVerdict = iota
	// ClaimPark is a claim without a grant and without room: and no room; acknowledge the task (a grant
	// enqueues the activation again).
	ClaimPark
	// ClaimBusy is a claim of an activation another live activation holds it; drop the task.
	ClaimBusy
)

// Claimed is what Claim returns.
type Claimed struct {
	Verdict    ClaimVerdict
	WaitingFor string
	WaitKey    string
	// Record is the activation's record as claimed (Held.Record).
	Record string
	Gen    int64
	// Allowance is what the running activation may spend before it tops
	// up (nano-dollars); -1 while its tenant has no spend limit.
	Allowance int64
}

// Claim turns req's grant into a running lease of lease held by token,
// before the registry's claim (10.1 step 3); without a grant it decides
// as a request does.
func (a *Admitter) Claim(ctx context.Context, req Request, token string, lease time.Duration) (Claimed, error) {
	p := a.Policy()
	if p == nil {
		return Claimed{Verdict: ClaimRun}, nil
	}
	body, err := json.Marshal(req)
	if err != nil {
		return Claimed{}, err
	}
	args := append(a.head(ctx, p, req.Tenant), req.Act, string(body), token, lease.Milliseconds(), grantsPerCall)
	res, err := a.run(ctx, claimScript, p, req.Tenant, args...)
	if err != nil {
		return Claimed{}, fmt.Errorf("admission claim %s: %w", req.Act, err)
	}
	if len(res) < 6 {
		return Claimed{}, reply.Unexpected("adm_claim", res)
	}
	c := Claimed{WaitingFor: reply.String(res[1]), WaitKey: reply.String(res[2]), Record: reply.String(res[3]), Gen: reply.Int(res[4]),
		Allowance: -1}
	switch reply.String(res[0]) {
	case "PARK":
		c.Verdict = ClaimPark
	case "BUSY":
		c.Verdict = ClaimBusy
	}
	var e Entry
	if json.Unmarshal([]byte(c.Record), &e) == nil && len(e.Windows) > 0 {
		c.Allowance = e.Allowance
	}
	return c, a.after(ctx, req.Tenant, res[5:])
}

// Ending is how an activation ended, for its release: what it spent
// (nano-dollars, settled against its allowance; negative: unknown, the
// whole allowance counts spent) and the root chain that ended with it
// ("": none; it leaves the chains in flight); and the activation of the
// same run before it (Lapsed, "": none) with what that one used
// (LapsedUsed, nano; negative: unknown): if its lease was reaped, its
// allowance is settled with it, once.
type Ending struct {
	Spent      int64
	Chain      string
	Lapsed     string
	LapsedUsed int64
}

// nanoArg is amount n (nano-dollars) as a script argument: "" when it is
// negative (unknown).
func nanoArg(n int64) string {
	if n < 0 {
		return ""
	}
	return strconv.FormatInt(n, 10)
}

// Release ends activation act of tenant held by token ("": whoever holds
// it), once, and enqueues what the freed slots granted (10.1 step 4).
// While admission is off it does nothing: a grant made before `admission
// off` is reaped when its lease lapses.
func (a *Admitter) Release(ctx context.Context, tenant, act, token string, end Ending) error {
	p := a.Policy()
	if p == nil {
		return nil
	}
	args := append(a.head(ctx, p, tenant), act, token, grantsPerCall, nanoArg(end.Spent), end.Chain, end.Lapsed, nanoArg(end.LapsedUsed))
	res, err := a.run(ctx, releaseScript, p, tenant, args...)
	if err != nil {
		return fmt.Errorf("admission release %s: %w", act, err)
	}
	if len(res) < 3 {
		return reply.Unexpected("adm_release", res)
	}
	return a.after(ctx, tenant, res[2:])
}

// Cancel removes the parked request of activation act of tenant (its run
// was cancelled while it waited), and ends root chain chain ("": none)
// when the run was its last; it reports whether there was a request.
func (a *Admitter) Cancel(ctx context.Context, tenant, act, chain string) (bool, error) {
	p := a.Policy()
	if p == nil {
		return false, nil
	}
	args := append(a.head(ctx, p, tenant), act, grantsPerCall, chain)
	res, err := a.run(ctx, cancelScript, p, tenant, args...)
	if err != nil {
		return false, fmt.Errorf("admission cancel %s: %w", act, err)
	}
	if len(res) < 3 {
		return false, reply.Unexpected("adm_cancel", res)
	}
	return reply.Int(res[0]) == 1, a.after(ctx, tenant, res[2:])
}

// Lapse is the allowance of a running activation whose lease was reaped
// (its worker died or stopped renewing), held in its windows until what
// it used is known (Settle).
type Lapse struct {
	Act string `json:"-"`
	Run string `json:"run"`
	// Allowance is what it held (nano-dollars); At when it was reaped.
	Allowance int64 `json:"al"`
	AtMs      int64 `json:"t"`
}

// Lapsed are up to limit of tenant's lapsed allowances not settled yet.
func (a *Admitter) Lapsed(ctx context.Context, tenant string, limit int) ([]Lapse, error) {
	var out []Lapse
	iter := a.rdb.HScan(ctx, a.ks.AdmTenant(tenant, "lapsed"), 0, "", int64(limit)).Iterator()
	for iter.Next(ctx) && len(out) < limit {
		act := iter.Val()
		if !iter.Next(ctx) {
			break
		}
		var l Lapse
		if err := json.Unmarshal([]byte(iter.Val()), &l); err != nil {
			continue
		}
		l.Act = act
		out = append(out, l)
	}
	if err := iter.Err(); err != nil {
		return nil, fmt.Errorf("lapsed allowances of tenant %s: %w", tenant, err)
	}
	return out, nil
}

// Settle settles lapsed activation act of tenant with what it used
// (nano-dollars; negative: unknown, its whole allowance), once; it
// reports whether act was lapsed. What the freed room grants is enqueued.
func (a *Admitter) Settle(ctx context.Context, tenant, act string, used int64) (bool, error) {
	p := a.Policy()
	if p == nil {
		return false, nil
	}
	args := append(a.head(ctx, p, tenant), act, nanoArg(used), grantsPerCall)
	res, err := a.run(ctx, settleScript, p, tenant, args...)
	if err != nil {
		return false, fmt.Errorf("admission settle %s: %w", act, err)
	}
	if len(res) < 3 {
		return false, reply.Unexpected("adm_settle", res)
	}
	return reply.Int(res[0]) == 1, a.after(ctx, tenant, res[2:])
}

// ChainsInFlight are tenant's root chains in flight (runs_in_flight
// counts them).
func (a *Admitter) ChainsInFlight(ctx context.Context, tenant string) ([]string, error) {
	roots, err := a.rdb.SMembers(ctx, a.ks.AdmTenant(tenant, "roots")).Result()
	if err != nil {
		return nil, fmt.Errorf("root chains in flight of tenant %s: %w", tenant, err)
	}
	return roots, nil
}

// EndChain ends tenant's root chain chain (it leaves the chains in
// flight, and what waited for runs_in_flight is admitted): the backstop
// of a chain whose end's release was lost.
func (a *Admitter) EndChain(ctx context.Context, tenant, chain string) error {
	_, err := a.Cancel(ctx, tenant, "", chain)
	return err
}

// TopUp lends running activation act of tenant (held by token) up to
// want nano-dollars more of its spend windows' room before a model call
// (9.2 step 3), once per id (<activation>:<turn>). It returns the
// activation's allowance after it; -1 when the tenant has no spend limit.
// ErrNotHeld: the activation holds no running grant under token.
func (a *Admitter) TopUp(ctx context.Context, tenant, act, token string, want int64, id string) (int64, error) {
	p := a.Policy()
	if p == nil {
		return -1, nil
	}
	args := append(a.head(ctx, p, tenant), act, token, want, id)
	res, err := a.run(ctx, topupScript, p, tenant, args...)
	if err != nil {
		return 0, fmt.Errorf("admission top-up %s: %w", act, err)
	}
	if len(res) != 2 {
		return 0, reply.Unexpected("adm_topup", res)
	}
	al := reply.Int(res[0])
	if al == -2 {
		return 0, ErrNotHeld
	}
	return al, nil
}

// ErrNotHeld is a top-up of an activation that holds no running grant
// (reaped, or another activation's).
var ErrNotHeld = errors.New("admission: the activation holds no running grant")

// Held is an activation a worker runs, as its renewals carry it.
type Held struct {
	Act    string
	Token  string
	Record string // its record as claimed, to re-assert after a failover
}

// Renewed is what a renewal of one tenant's leases found.
type Renewed struct {
	Fenced bool
	// Lost are activations whose grant is gone: the worker stops them.
	Lost []string
	// HandBack are activations re-asserted over a full key: they hand
	// back at their next turn.
	HandBack []string
	Gen      int64
}

// Renew renews the leases of a worker's activations of tenant to lease
// from now, one script for all of them (11.3), carrying the highest
// generation the worker saw (12.3).
func (a *Admitter) Renew(ctx context.Context, tenant string, seen int64, lease time.Duration, held []Held) (Renewed, error) {
	p := a.Policy()
	if p == nil {
		return Renewed{}, nil
	}
	args := append(a.head(ctx, p, tenant), seen, lease.Milliseconds(), grantsPerCall)
	for _, h := range held {
		args = append(args, h.Act, h.Token, h.Record)
	}
	res, err := a.run(ctx, renewScript, p, tenant, args...)
	if err != nil {
		return Renewed{}, fmt.Errorf("admission renew %s: %w", tenant, err)
	}
	r, rest, err := parseRenewed(res)
	if err != nil {
		return r, err
	}
	return r, a.after(ctx, tenant, rest)
}

func parseRenewed(res []any) (Renewed, []any, error) {
	bad := reply.Unexpected("adm_renew", res)
	if len(res) < 2 {
		return Renewed{}, nil, bad
	}
	r := Renewed{Fenced: reply.Int(res[0]) == 1}
	i := 1
	list := func() ([]string, bool) {
		if i >= len(res) {
			return nil, false
		}
		n := int(reply.Int(res[i]))
		i++
		if i+n > len(res) {
			return nil, false
		}
		var out []string
		for _, v := range res[i : i+n] {
			out = append(out, reply.String(v))
		}
		i += n
		return out, true
	}
	var ok bool
	if r.Lost, ok = list(); !ok {
		return r, nil, bad
	}
	if r.HandBack, ok = list(); !ok || i >= len(res) {
		return r, nil, bad
	}
	r.Gen = reply.Int(res[i])
	return r, res[i+1:], nil // retry at, then the grants
}

// PumpArgs are a pump's changes: a share (the balancer's), overrides to
// apply (field → value, "" clears it), or every override cleared.
type PumpArgs struct {
	Share *int
	// DemandCapped marks Share as its tenant's whole demand at the pass
	// (it asked for no more): until the next pass, its grants may go up
	// to its provisional share as its demand grows (adm.open).
	DemandCapped bool
	// ShareAtMost lowers a share above it (and leaves its time): the
	// tenant's share while a newcomer waits for the balancer's pass.
	ShareAtMost    *int
	Overrides      map[string]string
	ClearOverrides bool
}

// Pump applies args to tenant, moves the waiters that have room to the
// ready queue and grants up to the tenant's room; it enqueues the grants
// and returns how many it made.
func (a *Admitter) Pump(ctx context.Context, tenant string, args PumpArgs) (int, error) {
	p := a.Policy()
	if p == nil {
		p = &Published{}
	}
	share, over, clearAll := "", "", "0"
	if args.Share != nil {
		share = strconv.Itoa(*args.Share)
		if args.DemandCapped {
			share += "~"
		}
	}
	if args.ShareAtMost != nil {
		share = "<=" + strconv.Itoa(*args.ShareAtMost)
	}
	if len(args.Overrides) > 0 {
		b, err := json.Marshal(args.Overrides)
		if err != nil {
			return 0, err
		}
		over = string(b)
	}
	if args.ClearOverrides {
		clearAll = "1"
	}
	total := 0
	for {
		argv := append(a.head(ctx, p, tenant), share, over, clearAll, grantsPerPump)
		res, err := a.run(ctx, pumpScript, p, tenant, argv...)
		if err != nil {
			return total, fmt.Errorf("admission pump %s: %w", tenant, err)
		}
		if len(res) < 2 {
			return total, reply.Unexpected("adm_pump", res)
		}
		n := (len(res) - 2) / 2
		total += n
		if err := a.after(ctx, tenant, res[1:]); err != nil {
			return total, err
		}
		if n < grantsPerPump || ctx.Err() != nil {
			return total, nil
		}
		over, clearAll = "", "0"
	}
}

// Drain takes every parked and granted activation off tenant's queues
// and enqueues it (`admission off`); it returns how many.
func (a *Admitter) Drain(ctx context.Context, tenant string) (int, error) {
	total := 0
	for {
		args := append(a.head(ctx, nil, tenant), 256)
		res, err := drainScript.Run(ctx, a.rdb, a.tenantKeys(tenant), args...).Slice()
		if err != nil {
			return total, fmt.Errorf("admission drain %s: %w", tenant, err)
		}
		if len(res) == 0 {
			return total, nil
		}
		total += len(res) / 2
		if err := a.enqueue(ctx, tenant, res); err != nil {
			return total, err
		}
	}
}

// Where is where one activation stands in its tenant's slot.
type Where struct {
	State      string
	WaitingFor string
	WaitKey    string
	// Position is its place in line (1: next), 0 when not in a line.
	Position int
	Since    time.Time
	// KeyRunning and KeyMax are the waited-on key's slots held and max.
	KeyRunning, KeyMax int
}

// Line says where the activation waits, for people (`thread show`, the
// monitor's run page): what for, the key, the key's slots, its place in
// line and for how long as of now: "concurrency per_customer=c1 (2 of 2
// running, 4th in line, 38 s)".
func (w Where) Line(now time.Time) string {
	var parts []string
	if w.WaitKey != "" && w.KeyMax > 0 {
		parts = append(parts, fmt.Sprintf("%d of %d running", w.KeyRunning, w.KeyMax))
	}
	if w.Position > 0 {
		parts = append(parts, Ordinal(w.Position)+" in line")
	}
	parts = append(parts, fmt.Sprintf("%.0f s", max(0, now.Sub(w.Since).Seconds())))
	line := w.WaitingFor
	if w.WaitKey != "" {
		line += " " + w.WaitKey
	}
	return line + " (" + strings.Join(parts, ", ") + ")"
}

// Ordinal is n as "1st", "2nd", "3rd", "4th", "11th", "22nd".
func Ordinal(n int) string {
	suffix := "th"
	if n%100 < 11 || n%100 > 13 {
		switch n % 10 {
		case 1:
			suffix = "st"
		case 2:
			suffix = "nd"
		case 3:
			suffix = "rd"
		}
	}
	return strconv.Itoa(n) + suffix
}

// Where reads where activation act of tenant stands; ok false when
// admission has no record of it.
func (a *Admitter) Where(ctx context.Context, tenant, act string) (Where, bool, error) {
	ws, err := a.WhereMany(ctx, tenant, []string{act})
	if err != nil {
		return Where{}, false, err
	}
	w, ok := ws[act]
	return w, ok, nil
}

// whereBatch bounds the activations one adm_where call reads: a few
// reads each, so a call stays short however long a tenant's backlog.
const whereBatch = 1000

// WhereMany reads where each of acts (activations of tenant) stands, by
// activation; one admission has no record of is left out. It costs one
// adm_where call per whereBatch activations, not one per activation: the
// monitor's tenant page reads every run it lists so.
func (a *Admitter) WhereMany(ctx context.Context, tenant string, acts []string) (map[string]Where, error) {
	out := make(map[string]Where, len(acts))
	for batch := range slices.Chunk(acts, whereBatch) {
		args := make([]any, len(batch))
		for i, act := range batch {
			args[i] = act
		}
		res, err := whereScript.Run(ctx, a.rdb, a.tenantKeys(tenant), args...).Slice()
		if err != nil {
			return nil, fmt.Errorf("admission where (%d of %s): %w", len(batch), tenant, err)
		}
		if err := parseWheres(res, batch, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// parseWheres reads adm_where's reply for acts into out: the tenant's
// admitted and max_running, then seven values per activation.
func parseWheres(res []any, acts []string, out map[string]Where) error {
	const per = 7
	if len(res) != 2+per*len(acts) {
		return reply.Unexpected("adm_where", res)
	}
	admitted, maxRunning := reply.Int(res[0]), reply.Int(res[1])
	for i, act := range acts {
		v := res[2+per*i : 2+per*(i+1)]
		st := reply.String(v[0])
		if st == "" {
			continue
		}
		w := Where{State: st, WaitKey: reply.String(v[2]), Position: int(reply.Int(v[3])),
			Since: time.UnixMilli(reply.Int(v[4])), KeyRunning: int(reply.Int(v[5])), KeyMax: int(reply.Int(v[6]))}
		switch w.State {
		case StateReady:
			w.WaitingFor = WaitCapacity
			if maxRunning > 0 && admitted >= maxRunning {
				w.WaitingFor = WaitTenantConcurrency
			}
		case StateKey:
			w.WaitingFor = WaitConcurrency
		case StateBlocked:
			w.WaitingFor = reply.String(v[1])
		case StateGranted:
			w.WaitingFor = WaitCapacity // admitted, waiting for a worker to take it
		}
		out[act] = w
	}
	return nil
}

// after does what a tenant script's reply asks after it: res is its
// retry time (ms: when a ceiling it parked on has room again, 0: none),
// for which a pump is scheduled, then its grants, enqueued.
func (a *Admitter) after(ctx context.Context, tenant string, res []any) error {
	if len(res) == 0 {
		return nil
	}
	if at := reply.Int(res[0]); at > 0 {
		if err := a.SchedulePump(ctx, tenant, time.UnixMilli(at)); err != nil {
			a.log.Warn("admission: pump not scheduled (the balancer's pass pumps the tenant)", "tenant", tenant, "error", err)
		}
	}
	return a.enqueue(ctx, tenant, res[1:])
}

// enqueue enqueues the grants in res (activation, record pairs). A grant
// that cannot be enqueued stays granted and returns to the ready queue
// when its TTL lapses (11.3); the first error is returned.
func (a *Admitter) enqueue(ctx context.Context, tenant string, res []any) error {
	var first error
	for i := 0; i+1 < len(res); i += 2 {
		g := Grant{Act: reply.String(res[i]), Tenant: tenant}
		if err := json.Unmarshal([]byte(reply.String(res[i+1])), &g.Entry); err != nil {
			first = cmpErr(first, fmt.Errorf("admission grant %s: %w", g.Act, err))
			continue
		}
		if err := a.Enqueue(ctx, g); err != nil {
			first = cmpErr(first, err)
		}
	}
	return first
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// Enqueue enqueues grant g's task. A task that asynq holds as done (the
// activation was taken and parked, or Redis lost what its run did) is
// replaced (queue.Enqueuer.Reenqueue).
func (a *Admitter) Enqueue(ctx context.Context, g Grant) error {
	if a.enq == nil {
		return errors.New("admission: no enqueuer")
	}
	_, err := a.enq.Reenqueue(context.WithoutCancel(ctx), a.insp, g.Task(), g.Entry.Seq, g.Entry.Queue)
	return err
}

// Overrides are tenant's overrides (`spool tenant set`): field → value.
func (a *Admitter) Overrides(ctx context.Context, tenant string) (map[string]string, error) {
	m, err := a.rdb.HGetAll(ctx, a.ks.AdmTenant(tenant, "over")).Result()
	if err != nil {
		return nil, fmt.Errorf("overrides of tenant %s: %w", tenant, err)
	}
	return m, nil
}

// KnownTenants are the active tenants (keyspace AdmTenants) and those the
// published policy lists.
func (a *Admitter) KnownTenants(ctx context.Context) ([]string, error) {
	ts, err := a.rdb.ZRange(ctx, a.ks.AdmTenants(), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read the active tenants: %w", err)
	}
	seen := map[string]bool{}
	for _, t := range ts {
		seen[t] = true
	}
	if p := a.Policy(); p != nil {
		for t := range p.Policy.Tenants {
			if !seen[t] {
				ts = append(ts, t)
				seen[t] = true
			}
		}
	}
	sort.Strings(ts)
	return ts, nil
}

// Standing is a tenant's standing for a yield decision (8.3): what it
// has admitted, its share (0 when none is fresh), and the best priority
// waiting in its ready queue (0 when none waits).
type Standing struct {
	Admitted, Share int
	BestReady       int
}

// Over reports whether an activation of priority p should yield: its
// tenant is over its share, or a better priority waits in its ready
// queue.
func (s Standing) Over(p int) bool {
	return (s.Share > 0 && s.Admitted > s.Share) || (s.BestReady > 0 && s.BestReady < p)
}

// Standing reads tenant's standing: one read of its state and its ready
// queue's head.
func (a *Admitter) Standing(ctx context.Context, tenant string) (Standing, error) {
	var st Standing
	p := a.Policy()
	if p == nil {
		return st, nil
	}
	pipe := a.rdb.Pipeline()
	h := pipe.HMGet(ctx, a.ks.AdmTenant(tenant, "state"), "admitted", "share", "share_at")
	head := pipe.ZRangeWithScores(ctx, a.ks.AdmTenant(tenant, "ready"), 0, 0)
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return st, fmt.Errorf("standing of tenant %s: %w", tenant, err)
	}
	vals := h.Val()
	if len(vals) == 3 {
		st.Admitted, _ = strconv.Atoi(fmt.Sprint(vals[0]))
		at, _ := strconv.ParseInt(fmt.Sprint(vals[2]), 10, 64)
		if a.now().UnixMilli()-at <= p.Policy.shareTTL().Milliseconds() {
			st.Share, _ = strconv.Atoi(fmt.Sprint(vals[1]))
		}
	}
	if zs := head.Val(); len(zs) == 1 {
		st.BestReady = int(zs[0].Score / float64(int64(1)<<45))
	}
	return st, nil
}

// holdersScript counts a key's holders (adm_holders.lua).
var holdersScript = redisfn.New("adm_holders", Lua, holdersLua)

//go:embed adm_holders.lua
var holdersLua string

// Deadlocked reports whether activation act of tenant waits on a key
// that only activations of the runs in ancestors hold (6): a child that a
// blocking spawn waits for would wait for its own ancestors, which wait
// for it. It returns the key.
func (a *Admitter) Deadlocked(ctx context.Context, tenant, act string, ancestors []string) (bool, string, error) {
	w, ok, err := a.Where(ctx, tenant, act)
	if err != nil || !ok || w.State != StateKey {
		return false, "", err
	}
	args := []any{w.WaitKey}
	for _, r := range ancestors {
		args = append(args, r)
	}
	res, err := holdersScript.Run(ctx, a.rdb, a.tenantKeys(tenant), args...).Int64Slice()
	if err != nil {
		return false, "", fmt.Errorf("admission holders of %s: %w", w.WaitKey, err)
	}
	if len(res) != 2 {
		return false, "", reply.Unexpected("adm_holders", res)
	}
	return res[0] > 0 && res[0] == res[1], w.WaitKey, nil
}
