package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// Config configures an Orchestrator.
type Config struct {
	// Namespace of spool's Redis keys. Default keyspace.DefaultNamespace.
	Namespace string
	// Shards is the shard count of the namespace's keys
	// (keyspace.NewSharded; registry.Layout reads what the namespace
	// was created with). Default 1: one slot.
	Shards int
	// LeaseTTL is how long an activation's lease lives without a
	// heartbeat; a killed worker's thread is recovered after about this
	// long. Default 10s.
	LeaseTTL time.Duration
	// Tracing is where spool's spans go (package telemetry). Default
	// none: the API's no-op provider.
	Tracing trace.TracerProvider
	// Logger. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// NewID names a new thread (NewID). Default thread.NewID: a replay
	// (package history) names its threads as the recording did.
	NewID func(IDRequest) string
	// Model, when set, is the model of every thread started, whatever its
	// directive, spawn or parent name: a replay runs a whole tree on the
	// recorded turns or on the model it is given. Default none.
	Model string
	// TenantPriority is a tenant's default priority, which its roots
	// started without one run at (the admission policy's; 0 is
	// thread.DefaultPriority). Default: thread.DefaultPriority for every
	// tenant.
	TenantPriority func(ctx context.Context, tenant string) (int, error)
	// ConcurrencyKeys computes a new run's concurrency keys when it is
	// registered (the admission policy's rules over KeyInput); a
	// continuation carries its chain's instead. Default: none.
	ConcurrencyKeys func(ctx context.Context, run KeyInput) ([]registry.ConcurrencyKey, error)
	// IdempotencyRetention is how long an idempotency key names the run
	// it started (the admission policy's idempotency.retention). Default:
	// DefaultIdempotencyRetention.
	IdempotencyRetention func(ctx context.Context) (time.Duration, error)
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.Namespace == "" {
		c.Namespace = keyspace.DefaultNamespace
	}
	if c.LeaseTTL <= 0 {
		c.LeaseTTL = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// validate names the first bad field of c (after WithDefaults).
func (c Config) validate() error {
	if c.Shards < 0 || c.Shards > 1 && (c.Shards > keyspace.MaxShards || c.Shards&(c.Shards-1) != 0) {
		return fmt.Errorf("orchestrator config: Shards %d: want a power of two up to %d", c.Shards, keyspace.MaxShards)
	}
	return nil
}

// Orchestrator holds the services every thread operation uses.
type Orchestrator struct {
	cfg     Config
	rdb     redis.UniversalClient
	keys    keyspace.Space
	reg     *registry.Registry
	acts    *registry.Activations
	ledger  *ledger.Ledger
	store   blobstore.Store
	enq     *queue.Enqueuer
	signer  *transcript.Signer
	keyring *transcript.Keyring
	log     *slog.Logger

	projects *projectCache
	// fast is Redis for spool's own scripts: the auto-pipeliner the
	// registry, activations and ledger run on, and the compound scripts
	// (start.lua, finalize.lua), one redisfn.Client shared by all.
	fast *redisfn.Client
	// adm admits activations before they are enqueued (admission.go).
	adm *admission.Admitter
}

// New wires an Orchestrator over a Redis client, a blob store, an asynq
// enqueuer and the signing keys. The client and the store are required;
// without a signer, the orchestrator reads and verifies but signs
// nothing.
func New(cfg Config, rdb redis.UniversalClient, store blobstore.Store, enq *queue.Enqueuer, signer *transcript.Signer, keyring *transcript.Keyring) (*Orchestrator, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	switch {
	case rdb == nil:
		return nil, errors.New("orchestrator: a Redis client is required")
	case store == nil:
		return nil, errors.New("orchestrator: a blob store is required")
	}
	ks := keyspace.NewSharded(cfg.Namespace, cfg.Shards)
	fast := redisfn.NewClient(autopipe.Wrap(rdb)) // asynq keeps the plain client (Redis)
	reg, err := registry.New(registry.Config{Client: fast, Keys: ks, Now: cfg.Now})
	if err != nil {
		return nil, err
	}
	o := &Orchestrator{
		cfg:      cfg,
		rdb:      rdb,
		keys:     ks,
		reg:      reg,
		acts:     registry.NewActivations(fast, ks, cfg.Now),
		ledger:   ledger.New(fast, ks),
		store:    store,
		enq:      withKeys(enq, ks),
		signer:   signer,
		keyring:  keyring,
		log:      cfg.Logger,
		projects: newProjectCache(64),
		fast:     fast,
	}
	o.adm = newAdmitter(o)
	if o.cfg.ConcurrencyKeys == nil {
		o.cfg.ConcurrencyKeys = o.policyKeys
	}
	if o.cfg.TenantPriority == nil {
		o.cfg.TenantPriority = o.policyPriority
	}
	return o, nil
}

// WithLogger returns a copy of o that logs to log; everything else is
// shared.
func (o *Orchestrator) WithLogger(log *slog.Logger) *Orchestrator {
	c := *o
	c.log = log
	return &c
}

// IDRequest describes a thread about to be named: its directive, and its
// parent or the thread it continues, if any.
type IDRequest struct {
	Directive        string
	ParentID         string
	PreviousThreadID string
}

// newID names a new thread: Config.NewID, else thread.NewID.
func (o *Orchestrator) newID(r IDRequest) string {
	if o.cfg.NewID != nil {
		if id := o.cfg.NewID(r); id != "" {
			return id
		}
	}
	tree := r.ParentID
	if tree == "" {
		tree = r.PreviousThreadID
	}
	return thread.NewIDIn(r.Directive, o.Now(), tree)
}

// PlannedID names a child whose start may run again (StartRequest.Planned):
// Config.NewID, else thread.PlannedID of the child's directive, at (its
// parent's durable time), the parent's id and seed, which names the spawn
// within its parent.
func (rt *Runtime) PlannedID(r IDRequest, at time.Time, seed string) string {
	if name, err := directive.CleanName(r.Directive); err == nil {
		r.Directive = name
	}
	if rt.cfg.NewID != nil {
		if id := rt.cfg.NewID(r); id != "" {
			return id
		}
	}
	return thread.PlannedID(r.Directive, at, r.ParentID, seed)
}

// Now returns the orchestrator's clock reading.
func (o *Orchestrator) Now() time.Time { return o.cfg.Now() }

// withKeys gives the enqueuer the orchestrator's namespace.
func withKeys(e *queue.Enqueuer, ks keyspace.Space) *queue.Enqueuer {
	if e == nil {
		return nil
	}
	c := *e
	c.Keys = ks
	return &c
}

// threadLog returns the logger with the thread id attribute.
func (o *Orchestrator) threadLog(id string) *slog.Logger { return o.log.With("thread_id", id) }
