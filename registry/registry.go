package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/telemetry"
	"github.com/spool-run/spool/thread"
)

// Config configures a Registry.
type Config struct {
	// Client is the Redis client. Required. A *redisfn.Client is shared,
	// with what it knows of the server's Functions; another is wrapped
	// in one.
	Client redis.UniversalClient
	// Keys builds every key. Default keyspace.New("") (namespace "spool").
	Keys keyspace.Space
	// Now is the clock for created_at/updated_at. Default time.Now.
	Now func() time.Time
	// SafetyPoll is how often WaitTerminal re-reads the registry in case a
	// published event was lost (pub/sub is at-most-once). Default 2s.
	SafetyPoll time.Duration
}

// WithDefaults returns c with its zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.Keys.Prefix() == "" {
		c.Keys = keyspace.New("")
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.SafetyPoll <= 0 {
		c.SafetyPoll = 2 * time.Second
	}
	return c
}

func (c Config) validate() error {
	if c.Client == nil {
		return errors.New("registry config: Client is required")
	}
	return nil
}

// Registry is the thread registry and its continuation chains, in Redis
// hashes (one per thread, keyspace.Space.Thread). Every write is one Lua
// script (one round trip) and atomic. It is safe for concurrent use.
type Registry struct {
	rdb  *redisfn.Client
	ks   keyspace.Space
	now  func() time.Time
	poll time.Duration
	// dirIndexed: every run is in its directive's index (directiveIndexed).
	dirIndexed atomic.Bool
}

// New returns a registry.
func New(cfg Config) (*Registry, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Registry{rdb: redisfn.NewClient(cfg.Client), ks: cfg.Keys, now: cfg.Now, poll: cfg.SafetyPoll}, nil
}

// NewThread is what Register needs to create a thread record.
type NewThread struct {
	ThreadID         string
	Directive        string
	ParentID         string // "" for a root; must be registered
	PreviousThreadID string // handoff / resume: the thread this one continues
	ChainRootID      string // default: ThreadID
	ContinuationOf   string
	Limits           thread.Resolved
	Model            string
	Capabilities     []string
	Bundle           string         // content digest of the directive bundle
	Inputs           map[string]any // directive inputs
	Queue            string
	// DroppedCapabilities are those the thread's directive asks for that
	// its parent does not hold (Record).
	DroppedCapabilities []string
	// TraceParent and TraceCaller are the thread's trace context (Record).
	TraceParent, TraceCaller string
	// ChainIndex, ContinuationKind and ContinuationMessage describe a
	// continuation (see Record).
	ChainIndex          int
	ContinuationKind    string
	ContinuationMessage string
	// LedgerPath is the ledger entries above the thread's (Record).
	LedgerPath []string
	// ModelOverride is the tree's explicit model (Record).
	ModelOverride string
	// The fork fields and Workspace (see Record).
	ForkedFrom    string
	ForkTurn      int
	ForkSegment   int64
	ForkChainHash string
	ForkMessage   string
	Workspace     string
	// Kind, GraphDigest and MaxSteps describe a graph run (Record);
	// Kind "" registers a thread.
	Kind        string
	GraphDigest string
	MaxSteps    int
	// Tenant and Priority are the run's root's (Record); "" and 0 are
	// thread.DefaultTenant and thread.DefaultPriority. IdempotencyKey is
	// the key a root was started with, ConcurrencyKeys its values of the
	// admission policy's rules.
	Tenant          string
	Priority        int
	IdempotencyKey  string
	ConcurrencyKeys []ConcurrencyKey
	// Tags are the run's root's (Record.Tags): each indexed (TagThreads).
	Tags map[string]string
	// Notify and Webhooks are the tree's (Record.Notify, Record.Webhooks).
	Notify   string
	Webhooks bool
	// Fields are more hash fields, raw (Record.Extra); they may not name
	// a field the registry sets.
	Fields map[string]string
}

// Register creates the record of a new thread: status created, version 1,
// chain_root_id defaulting to its own id, ancestors and depth derived from
// the parent's record. It adds the id to the threads index, its tenant's
// index, the active set and the parent's children. ErrExists on a duplicate id; ErrParentNotFound
// when ParentID is not registered.
func (r *Registry) Register(ctx context.Context, nt NewThread) (*Record, error) {
	g, err := r.Registration(nt)
	if err != nil {
		return nil, err
	}
	res, err := regRegisterScript.Run(ctx, r.rdb, g.Keys, g.Args...).Result()
	return g.Record(res, err)
}

// Registration is the registration of a new thread as registry.lua's
// register takes it: its Keys and Args, and Record, which reads the
// reply. Register runs it alone; package orchestrator's start.lua runs it
// after the thread's budget.
type Registration struct {
	Keys []string
	Args []any

	nt     NewThread
	now    time.Time
	inputs []byte // as stored, for the record
}

// Registration encodes nt for registry.lua's register.
func (r *Registry) Registration(nt NewThread) (*Registration, error) {
	if nt.ThreadID == "" {
		return nil, errors.New("register thread: empty thread id")
	}
	if nt.ParentID == nt.ThreadID {
		return nil, fmt.Errorf("register thread %q: it cannot be its own parent", nt.ThreadID)
	}
	nt.Tenant, nt.Priority = thread.TenantOrDefault(nt.Tenant), thread.PriorityOrDefault(nt.Priority)
	fields := []any{"directive", nt.Directive, "model", nt.Model, "bundle", nt.Bundle, "queue", nt.Queue,
		"tenant", nt.Tenant, "priority", nt.Priority,
		"previous_thread_id", nt.PreviousThreadID, "chain_root_id", nt.ChainRootID, "continuation_of", nt.ContinuationOf,
		"continuation_thread_id", "", "result", "", "chain_index", nt.ChainIndex, "continuation_kind", nt.ContinuationKind,
		"continuation_message", nt.ContinuationMessage}
	fields, err := optionalFields(fields, &nt)
	if err != nil {
		return nil, err
	}
	fields, inputs, err := jsonFields(fields, &nt)
	if err != nil {
		return nil, err
	}
	now := r.now().UTC().Round(0)
	keys := []string{r.ks.Thread(nt.ThreadID), r.ks.Threads(nt.ThreadID), r.ks.Active(nt.ThreadID), r.ks.TenantThreads(nt.Tenant, nt.ThreadID)}
	if nt.ParentID != "" {
		keys = append(keys, r.ks.Thread(nt.ParentID), r.ks.Children(nt.ParentID))
	}
	keys = append(keys, r.tagKeys(nt.Directive, nt.Tags, nt.ThreadID)...)
	args := append([]any{nt.ThreadID, now.Format(time.RFC3339Nano), now.UnixMilli(), nt.ParentID}, fields...)
	return &Registration{Keys: keys, Args: args, nt: nt, now: now, inputs: inputs}, nil
}

// optionalFields appends to fields the fields of nt that are written only
// when set (a model override, the trace context, the ledger path, a fork,
// a workspace, dropped capabilities, a graph run's), then the caller's
// own Fields, refused when one names a field the registry sets.
func optionalFields(fields []any, nt *NewThread) ([]any, error) {
	if nt.ModelOverride != "" {
		fields = append(fields, "model_override", nt.ModelOverride)
	}
	if nt.TraceParent != "" {
		fields = append(fields, "trace_parent", nt.TraceParent, "trace_caller", nt.TraceCaller)
	}
	if nt.ForkedFrom != "" {
		fields = append(fields, "forked_from", nt.ForkedFrom, "fork_turn", nt.ForkTurn, "fork_segment", nt.ForkSegment,
			"fork_chain_hash", nt.ForkChainHash, "fork_message", nt.ForkMessage)
	}
	if nt.Workspace != "" {
		fields = append(fields, "workspace", nt.Workspace)
	}
	if nt.Kind == KindGraph {
		fields = append(fields, "kind", nt.Kind, "graph_digest", nt.GraphDigest, "max_steps", nt.MaxSteps, StepField, 0)
	}
	if nt.IdempotencyKey != "" {
		fields = append(fields, "idempotency_key", nt.IdempotencyKey)
	}
	if nt.Notify != "" {
		fields = append(fields, "notify", nt.Notify)
	}
	if nt.Webhooks {
		fields = append(fields, "webhooks", "1")
	}
	for _, jf := range []struct {
		name string
		v    any
		set  bool
	}{{"ledger_path", nt.LedgerPath, len(nt.LedgerPath) > 0}, {"dropped_capabilities", nt.DroppedCapabilities, len(nt.DroppedCapabilities) > 0},
		{"concurrency_keys", nt.ConcurrencyKeys, len(nt.ConcurrencyKeys) > 0}, {"tags", nt.Tags, len(nt.Tags) > 0}} {
		if !jf.set {
			continue
		}
		b, err := json.Marshal(jf.v)
		if err != nil {
			return nil, fmt.Errorf("register thread %q: %s: %w", nt.ThreadID, jf.name, err)
		}
		fields = append(fields, jf.name, string(b))
	}
	for k, v := range nt.Fields {
		if knownFields[k] {
			return nil, fmt.Errorf("register thread %q: field %s is the registry's", nt.ThreadID, k)
		}
		fields = append(fields, k, v)
	}
	return fields, nil
}

// jsonFields appends to fields the JSON fields every record starts with:
// nt's limits, capabilities and inputs, empty outputs and a zero cost. It
// returns the inputs as stored too, for the record Register returns.
func jsonFields(fields []any, nt *NewThread) ([]any, []byte, error) {
	var inputs []byte
	for _, jf := range []struct {
		name string
		v    any
	}{{"limits", nt.Limits}, {"capabilities", orEmpty(nt.Capabilities)}, {"inputs", orEmptyMap(nt.Inputs)},
		{"outputs", map[string]any{}}, {"cost", thread.Cost{}}} {
		b, err := json.Marshal(jf.v)
		if err != nil {
			return nil, nil, fmt.Errorf("register thread %q: %s: %w", nt.ThreadID, jf.name, err)
		}
		fields = append(fields, jf.name, string(b))
		if jf.name == "inputs" {
			inputs = b
		}
	}
	return fields, inputs, nil
}

// Record is the record registered, read from the reply v of registry.lua's
// register, or from err, the script's failure: ErrExists,
// ErrParentNotFound, or the failure wrapped.
func (g *Registration) Record(v any, err error) (*Record, error) {
	if err != nil {
		return nil, scriptError(fmt.Sprintf("register thread %q", g.nt.ThreadID), g.nt.ThreadID, 0, err)
	}
	return registered(g.nt, g.now, g.inputs, reply.Array(v))
}

// Get returns a thread's record, or ErrNotFound.
func (r *Registry) Get(ctx context.Context, id string) (*Record, error) {
	m, err := r.rdb.HGetAll(ctx, r.ks.Thread(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("get thread %q: %w", id, err)
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("thread %q: %w", id, ErrNotFound)
	}
	return parseRecord(m)
}

// GetLeased returns a thread's record and whether an activation holds
// its lease, read at one moment (one transaction: the record and its
// lease share a slot), or ErrNotFound.
func (r *Registry) GetLeased(ctx context.Context, id string) (*Record, bool, error) {
	var all *redis.MapStringStringCmd
	var lease *redis.IntCmd
	_, err := r.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		all = p.HGetAll(ctx, r.ks.Thread(id))
		lease = p.Exists(ctx, r.ks.Lease(id))
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("get thread %q: %w", id, err)
	}
	if len(all.Val()) == 0 {
		return nil, false, fmt.Errorf("thread %q: %w", id, ErrNotFound)
	}
	rec, err := parseRecord(all.Val())
	return rec, lease.Val() == 1, err
}

// GetMany returns the records of ids in one round trip, in the order of
// ids; ids that are not registered are left out.
func (r *Registry) GetMany(ctx context.Context, ids []string) ([]*Record, error) {
	recs, err := r.getEach(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := recs[:0]
	for _, rec := range recs {
		if rec != nil {
			out = append(out, rec)
		}
	}
	return out, nil
}

// Statuses returns the status of each of ids in one round trip; an id
// that is not registered is left out. It reads one field of each record,
// not the record: a poll over many threads that mostly still run.
func (r *Registry) Statuses(ctx context.Context, ids []string) (map[string]thread.Status, error) {
	out := make(map[string]thread.Status, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGet(ctx, r.ks.Thread(id), "status")
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("thread statuses: %w", err)
	}
	for i, c := range cmds {
		if st, err := c.Result(); err == nil {
			out[ids[i]] = thread.Status(st)
		}
	}
	return out, nil
}

// getEach returns the record of each of ids in one round trip, nil for an
// id that is not registered.
func (r *Registry) getEach(ctx context.Context, ids []string) ([]*Record, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	pipe := r.rdb.Pipeline()
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	for i, id := range ids {
		cmds[i] = pipe.HGetAll(ctx, r.ks.Thread(id))
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("get threads: %w", err)
	}
	out := make([]*Record, len(ids))
	for i, c := range cmds {
		if len(c.Val()) == 0 {
			continue
		}
		rec, err := parseRecord(c.Val())
		if err != nil {
			return nil, err
		}
		out[i] = rec
	}
	return out, nil
}

// Transition changes a thread's status, checked against thread's transition
// table inside Lua (*thread.TransitionError otherwise). expectedVersion 0
// means any version; a stale one is a *ConflictError and nothing changes. A
// terminal status leaves the active set; the change is published on
// keyspace.Space.Events as "<id> <status>". Returns the new version.
func (r *Registry) Transition(ctx context.Context, id string, to thread.Status, expectedVersion int64) (int64, error) {
	if !to.Valid() {
		return 0, fmt.Errorf("transition thread %q: unknown status %q", id, to)
	}
	return r.Commit(ctx, id, expectedVersion, Changes{Status: to})
}

// UpdateStatus is the spec's update_status: Transition at any version.
func (r *Registry) UpdateStatus(ctx context.Context, id string, to thread.Status) error {
	_, err := r.Transition(ctx, id, to, 0)
	return err
}

// SetResult stores a thread's final result text and outputs, at any
// version (the spec's set_result; the worker's finalize uses Commit with
// its lease instead). Outputs nil leaves the outputs unchanged.
func (r *Registry) SetResult(ctx context.Context, id, result string, outputs map[string]any) error {
	_, err := r.Commit(ctx, id, 0, Changes{Result: &result, Outputs: outputs})
	return err
}

// UpdateCostSnapshot is the spec's update_cost_snapshot. It is a Commit
// naming the activation's lease version, so that a worker whose lease was
// taken over cannot overwrite the new activation's cost: it gets a
// *ConflictError. Returns the new version (the caller's new lease).
func (r *Registry) UpdateCostSnapshot(ctx context.Context, id string, expectedVersion int64, cost thread.Cost) (int64, error) {
	return r.Commit(ctx, id, expectedVersion, Changes{Cost: &cost})
}

// ListActive returns the records of every non-terminal thread, oldest first.
func (r *Registry) ListActive(ctx context.Context) ([]*Record, error) {
	return r.listSet(ctx, r.ks.AllActive()...)
}

// ListChildren returns the records of a parent's children, oldest first.
func (r *Registry) ListChildren(ctx context.Context, parent string) ([]*Record, error) {
	return r.listSet(ctx, r.ks.Children(parent))
}

// AddFork lists fork as a fork of id (ListForks). Fork does it before
// the fork is registered, so a registered fork is always listed; an id
// listed without a record is left out of ListForks.
func (r *Registry) AddFork(ctx context.Context, id, fork string) error {
	if err := r.rdb.SAdd(ctx, r.ks.Forks(id), fork).Err(); err != nil {
		return fmt.Errorf("list fork %q of %q: %w", fork, id, err)
	}
	return nil
}

// ListForks returns the threads forked from id, oldest first.
func (r *Registry) ListForks(ctx context.Context, id string) ([]*Record, error) {
	return r.listSet(ctx, r.ks.Forks(id))
}

func (r *Registry) listSet(ctx context.Context, keys ...string) ([]*Record, error) {
	ids, err := members(ctx, r.rdb, keys)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", keys[0], err)
	}
	recs, err := r.GetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	sort.SliceStable(recs, func(i, j int) bool {
		if !recs[i].CreatedAt.Equal(recs[j].CreatedAt) {
			return recs[i].CreatedAt.Before(recs[j].CreatedAt)
		}
		return recs[i].ThreadID < recs[j].ThreadID
	})
	return recs, nil
}

// Filter selects threads for List. Zero fields match everything.
type Filter struct {
	Status    thread.Status
	Directive string
	Parent    string
	// Kind is KindGraph for graph runs only, KindThread for threads
	// only; "" for both.
	Kind string
	// Tenant is one tenant's runs only; "" for every tenant's.
	Tenant string
	// WaitingFor is the waiting runs that wait for this only (children,
	// approval, capacity, concurrency, ...); "" for any.
	WaitingFor string
	// Tags are the runs that carry every one of these tags only.
	Tags map[string]string
	// Since and Until bound the runs' creation time (inclusive); zero:
	// unbounded.
	Since, Until time.Time
	// After is the cursor of the last run of the page before: the runs
	// after it only (nil: from the newest).
	After *Cursor
	Limit int // 0: no limit
}

func (f Filter) match(rec *Record) bool {
	return (f.Status == "" || rec.Status == f.Status) &&
		(f.Directive == "" || rec.Directive == f.Directive) &&
		(f.Parent == "" || rec.ParentID == f.Parent) &&
		(f.Kind == "" || rec.Kind == f.Kind) &&
		(f.Tenant == "" || rec.TenantOrDefault() == f.Tenant) &&
		(f.WaitingFor == "" || rec.Status == thread.StatusWaiting && rec.WaitingFor == f.WaitingFor) &&
		f.hasTags(rec) && f.inRange(rec)
}

// List returns the threads that match f, newest first. A parent's
// children are read from its children set, threads of a status that is
// not final (created, running, waiting) and those waiting for something
// from the active set, and a
// tenant's runs from its index: none reads the records of every thread
// ever registered, as the other filters do (oldest last, page by page,
// until Limit). The default tenant's runs are read from every thread's
// records, for runs registered before tenants are its too and in no
// index. A directive's runs are read from its index once every run is in
// it (BackfillDirectiveIndex). With tags, one tag's index is read (the others are
// checked on the records): the one fewest runs carry; the time bounds and the cursor bound the
// scores read from an index.
func (r *Registry) List(ctx context.Context, f Filter) ([]*Record, error) {
	switch {
	case f.Parent != "" || f.Status != "" && !f.Status.Terminal() || f.WaitingFor != "":
		return r.listFromSet(ctx, f)
	case len(f.Tags) > 0:
		tag, err := r.rarestTag(ctx, f.Tags)
		if err != nil {
			return nil, err
		}
		return r.listByTime(ctx, f, func(ctx context.Context, w Window) ([]redis.Z, error) {
			return r.byTime(ctx, r.ks.AllTagThreads(tag), w)
		})
	case f.Directive != "" && r.directiveIndexed(ctx):
		return r.listByTime(ctx, f, func(ctx context.Context, w Window) ([]redis.Z, error) {
			return r.byTime(ctx, r.ks.AllDirectiveThreads(f.Directive), w)
		})
	case f.Tenant != "" && f.Tenant != thread.DefaultTenant:
		return r.listByTime(ctx, f, func(ctx context.Context, w Window) ([]redis.Z, error) {
			return r.TenantThreadsByTime(ctx, f.Tenant, w)
		})
	}
	return r.listByTime(ctx, f, r.ThreadsByTime)
}

// listFromSet is List from a set that holds every thread f can match: the
// parent's children, or the active set for a status that is not final.
// The set is read in one go, filtered newest first.
func (r *Registry) listFromSet(ctx context.Context, f Filter) ([]*Record, error) {
	var recs []*Record
	var err error
	if f.Parent != "" {
		recs, err = r.ListChildren(ctx, f.Parent)
	} else {
		recs, err = r.ListActive(ctx)
	}
	if err != nil {
		return nil, err
	}
	var out []*Record
	for i := len(recs) - 1; i >= 0 && (f.Limit <= 0 || len(out) < f.Limit); i-- {
		if f.match(recs[i]) {
			out = append(out, recs[i])
		}
	}
	return out, nil
}

// listByTime is List from an index by time (read: every thread's, or a
// tenant's), newest first, a page of records at a time, until Limit or
// the oldest thread.
func (r *Registry) listByTime(ctx context.Context, f Filter, read func(context.Context, Window) ([]redis.Z, error)) ([]*Record, error) {
	// The first page is as long as the limit, each next one twice the
	// one before, up to 256 records a read.
	const most = 256
	page := int64(most)
	if f.Limit > 0 && f.Limit < most {
		page = int64(f.Limit)
	}
	var out []*Record
	lo, hi := f.window()
	for start := int64(0); ; start, page = start+page, min(2*page, most) {
		zs, err := read(ctx, Window{Min: lo, Max: hi, Newest: true, Offset: start, Count: page})
		if err != nil {
			return nil, fmt.Errorf("list threads: %w", err)
		}
		ids := IDs(zs)
		recs, err := r.GetMany(ctx, ids)
		if err != nil {
			return nil, err
		}
		for _, rec := range recs {
			if f.match(rec) {
				out = append(out, rec)
				if f.Limit > 0 && len(out) == f.Limit {
					return out, nil
				}
			}
		}
		if int64(len(ids)) < page {
			return out, nil
		}
	}
}

// IncrSpawns checks and increments parent's spawn counter atomically: it
// returns the new count, or, when the parent has already spawned limit
// children, a spawns_exceeded *thread.LimitError with the counter unchanged.
// A negative limit is unlimited.
func (r *Registry) IncrSpawns(ctx context.Context, parent string, limit int) (int, error) {
	n, err := regSpawnScript.Run(ctx, r.rdb, []string{r.ks.Spawns(parent)}, limit).Int64()
	if rf, ok := reply.Refused(err); ok && rf.Code == "SPAWNLIMIT" {
		return int(rf.Int(0)), fmt.Errorf("spawn a child of %q: %w", parent, &thread.LimitError{
			Code: thread.CodeSpawnsExceeded, Current: float64(rf.Int(0)), Max: float64(limit)})
	}
	if err != nil {
		return 0, fmt.Errorf("count spawns of %q: %w", parent, err)
	}
	return int(n), nil
}

// UndoSpawn gives back a spawn counted by IncrSpawns for a child that was
// then not started (its budget did not fit, its registration failed). The
// counter never goes below zero.
func (r *Registry) UndoSpawn(ctx context.Context, parent string) error {
	if err := regUnspawnScript.Run(ctx, r.rdb, []string{r.ks.Spawns(parent)}).Err(); err != nil {
		return fmt.Errorf("undo a spawn of %q: %w", parent, err)
	}
	return nil
}

// RequestCancel sets a thread's cancel flag and publishes "<id> cancel" on
// the events channel. It does not change the status or the version: the
// activation running the thread sees the flag (CancelRequested, or the
// event) and finishes the thread as cancelled itself. cascade records
// whether the cancel may reach the thread's children (CancelCascadeField);
// once any request asked for a cascade, it stays asked.
func (r *Registry) RequestCancel(ctx context.Context, id string, cascade bool) error {
	c := "0"
	if cascade {
		c = "1"
	}
	err := regCancelScript.Run(ctx, r.rdb, []string{r.ks.Thread(id), r.ks.Control(id), r.ks.Events(id)}, id, c).Err()
	if err != nil {
		return scriptError(fmt.Sprintf("cancel thread %q", id), id, 0, err)
	}
	return nil
}

// CancelRequested reports whether a cancel was requested for a thread.
func (r *Registry) CancelRequested(ctx context.Context, id string) (bool, error) {
	vals, err := r.rdb.HMGet(ctx, r.ks.Thread(id), "thread_id", "cancel_requested").Result()
	if err != nil {
		return false, fmt.Errorf("cancel flag of %q: %w", id, err)
	}
	if vals[0] == nil {
		return false, fmt.Errorf("thread %q: %w", id, ErrNotFound)
	}
	return vals[1] == "1", nil
}

// registered is the record Register wrote for nt at now with inputs (as
// stored), from the fields its script derived (reply {ancestors, depth,
// chain root}): what Get would read back, without reading it.
func registered(nt NewThread, now time.Time, inputs []byte, res []any) (*Record, error) {
	if len(res) < 3 {
		return nil, reply.Unexpected("registry register", res)
	}
	depth, ok := res[1].(int64)
	if !ok {
		return nil, reply.Unexpected("registry register", res)
	}
	rec := &Record{
		ThreadID: nt.ThreadID, Directive: nt.Directive, Status: thread.StatusCreated, ParentID: nt.ParentID,
		ChainRootID: reply.String(res[2]), ContinuationOf: nt.ContinuationOf, Outputs: map[string]any{},
		Limits: nt.Limits, Model: nt.Model, Capabilities: append([]string{}, nt.Capabilities...), Bundle: nt.Bundle,
		DroppedCapabilities: append([]string(nil), nt.DroppedCapabilities...), Queue: nt.Queue, Depth: int(depth), PreviousThreadID: nt.PreviousThreadID,
		CreatedAt: now, UpdatedAt: now, Version: 1, ChainIndex: nt.ChainIndex,
		ContinuationKind: nt.ContinuationKind, ContinuationMessage: nt.ContinuationMessage,
		LedgerPath: append([]string(nil), nt.LedgerPath...), ModelOverride: nt.ModelOverride,
		ForkedFrom: nt.ForkedFrom, ForkTurn: nt.ForkTurn, ForkSegment: nt.ForkSegment, ForkChainHash: nt.ForkChainHash,
		ForkMessage: nt.ForkMessage, Workspace: nt.Workspace, Kind: KindThread,
		Tenant: nt.Tenant, Priority: nt.Priority, IdempotencyKey: nt.IdempotencyKey, Tags: nt.Tags,
		Notify: nt.Notify, Webhooks: nt.Webhooks,
		ConcurrencyKeys: append([]ConcurrencyKey(nil), nt.ConcurrencyKeys...),
	}
	if nt.Kind == KindGraph {
		rec.Kind, rec.GraphDigest, rec.MaxSteps = KindGraph, nt.GraphDigest, nt.MaxSteps
	}
	if err := json.Unmarshal([]byte(reply.String(res[0])), &rec.Ancestors); err != nil {
		return nil, fmt.Errorf("register thread %q: ancestors: %w", nt.ThreadID, err)
	}
	rec.TraceParent, rec.TraceCaller, rec.TraceID = nt.TraceParent, nt.TraceCaller, telemetry.TraceID(nt.TraceParent)
	// Inputs as stored: JSON's numbers, maps and lists, not the caller's.
	if err := json.Unmarshal(inputs, &rec.Inputs); err != nil {
		return nil, fmt.Errorf("register thread %q: inputs: %w", nt.ThreadID, err)
	}
	return rec, nil
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func orEmptyMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
