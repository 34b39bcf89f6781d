package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/launch"
	"github.com/spool-run/spool/orchestrator"
)

// Config configures a Scheduler.
type Config struct {
	// Redis is the orchestrator's Redis client: the scheduler keeps its
	// locks (one tick's, one housekeeping pass's) and the housekeeping
	// marker there, reads the run_id of the server that holds the threads
	// to tell that Redis lost writes, and prunes Function libraries. It
	// touches no thread's keys: those it reads and writes through the
	// orchestrator. Required.
	Redis redis.UniversalClient
	// Entries are the schedules to run (Load reads a project's). Default
	// none: the scheduler only does housekeeping.
	Entries []Entry
	// Project is the project root a scheduled thread's bundle snapshots.
	// Required when Entries is not empty (unless Bundle is set).
	Project string
	// UserDir is the user space bundled with the project. Default the
	// home directory; "-" for none.
	UserDir string
	// Bundle builds the bundle digest of a thread run with model. Default
	// launch.ProjectBundle over Project and UserDir, built at each tick that this
	// process takes, so a scheduled thread sees the project as it is then.
	Bundle func(ctx context.Context, model string) (string, error)
	// MisfireGrace is how late a tick may be acted on (a stalled process,
	// a slow start). Older ticks are counted missed and get no thread;
	// of several missed ticks only the newest is still run. Default 30s.
	MisfireGrace time.Duration
	// StartTimeout bounds the start of one tick's thread. Default 30s.
	StartTimeout time.Duration
	// HousekeepingInterval is how often a housekeeping pass runs (orphans,
	// stalled wakes, retention). Default 30s; negative disables it.
	HousekeepingInterval time.Duration
	// Retention is the age after which the persisted artifacts of a
	// finished thread are deleted. Default 0: keep forever.
	Retention time.Duration
	// RecordRetention is the age after which the Redis records of a
	// finished tree (its threads' registry records, ledger entries, sets
	// and queues) are deleted, once Retention deleted their artifacts: a
	// registry that would otherwise grow by a record a thread for good.
	// Default 0: keep forever. Set, it needs Retention and must not be
	// shorter.
	RecordRetention time.Duration
	// RecordRetentionTree bounds the threads of one tree RecordRetention
	// walks: the records of a larger tree are kept (and it is logged once
	// per process). Default 100,000.
	RecordRetentionTree int
	// RetentionScan bounds the registry records one pass examines.
	// Default 2000.
	RetentionScan int
	// ReconcileInterval is how often a housekeeping pass also holds every
	// non-terminal thread to its transcript when no loss of Redis writes
	// was detected (see the package doc). Default 10m; negative disables
	// the periodic pass (a detected loss is still reconciled).
	ReconcileInterval time.Duration
	// FunctionsUnused is how long none of a fleet's processes may have
	// used one of spool's Redis Function libraries (those of versions no
	// longer deployed) before housekeeping deletes it (redisfn.Prune, at
	// most once an hour). Default 7 days; negative keeps them all.
	FunctionsUnused time.Duration
	// ReconcileWindow: after a detected loss of Redis writes, the threads
	// created within this window are reconciled too, finished or not.
	// Default 15m.
	ReconcileWindow time.Duration
	// CleanStop is what the process that ran this Redis last saw when it
	// stopped it cleanly (Seal: spool dev, of its own embedded Redis), or
	// nil. A pass that finds Redis under another run_id knows it lost
	// nothing when the marker is still the one sealed (its run_id, a
	// canary no lower): no warning, no reconciliation. A marker gone or
	// behind it is a loss, said as one.
	CleanStop *CleanStop
	// OnTick, if set, is called with every tick outcome of this process
	// (from the entry's goroutine; it should return quickly).
	OnTick func(TickResult)
	// Logger. Default the orchestrator's.
	Logger *slog.Logger
	// Metrics, or nil for none.
	Metrics *Metrics
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.MisfireGrace <= 0 {
		c.MisfireGrace = 30 * time.Second
	}
	if c.StartTimeout <= 0 {
		c.StartTimeout = 30 * time.Second
	}
	if c.HousekeepingInterval == 0 {
		c.HousekeepingInterval = 30 * time.Second
	}
	if c.RetentionScan <= 0 {
		c.RetentionScan = 2000
	}
	if c.RecordRetentionTree <= 0 {
		c.RecordRetentionTree = 100_000
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = 10 * time.Minute
	}
	if c.FunctionsUnused == 0 {
		c.FunctionsUnused = 7 * 24 * time.Hour
	}
	if c.ReconcileWindow <= 0 {
		c.ReconcileWindow = 15 * time.Minute
	}
	if c.UserDir == "" {
		c.UserDir, _ = os.UserHomeDir()
	}
	if c.UserDir == "-" {
		c.UserDir = ""
	}
	return c
}

func (c Config) validate() error {
	if c.Redis == nil {
		return errors.New("scheduler: Config.Redis is required (the orchestrator's Redis)")
	}
	if len(c.Entries) > 0 && c.Project == "" && c.Bundle == nil {
		return errors.New("scheduler: Config.Project is required to bundle scheduled threads")
	}
	if c.Retention < 0 {
		return fmt.Errorf("scheduler: Config.Retention %s: must not be negative", c.Retention)
	}
	if c.RecordRetention < 0 || c.RecordRetention > 0 && (c.Retention == 0 || c.RecordRetention < c.Retention) {
		return fmt.Errorf("scheduler: Config.RecordRetention %s: must be at least Retention (%s), which it needs: records go after the artifacts they name",
			c.RecordRetention, c.Retention)
	}
	seen := map[string]bool{}
	for i, e := range c.Entries {
		if e.schedule == nil {
			return fmt.Errorf("scheduler: Config.Entries[%d] %q: not made by Parse or Load", i, e.ID)
		}
		if seen[e.ID] {
			return fmt.Errorf("scheduler: Config.Entries[%d]: duplicate id %q", i, e.ID)
		}
		seen[e.ID] = true
	}
	return nil
}

// Scheduler starts the threads of cron-scheduled directives and runs
// housekeeping. Any number of scheduler processes may run on one Redis:
// each tick of each entry starts exactly one thread (see the package doc).
type Scheduler struct {
	cfg Config
	// o is the orchestrator as housekeeping has it: its operations, and
	// the writes of reconciliation and retention.
	o     *orchestrator.Housekeeper
	log   *slog.Logger
	token string // this process's lock holder token
	// keys name the scheduler's own keys (its locks, the housekeeping
	// marker); scripts runs its scripts on Config.Redis.
	keys    keyspace.Space
	scripts *redisfn.Client
	// pass is held by the housekeeping pass this process runs.
	pass sync.Mutex

	mu       sync.Mutex
	status   map[string]*EntryStatus
	started  bool
	stopped  bool
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	retainAt float64         // retention watermark: threads created before it are settled
	forgetAt float64         // the same for RecordRetention
	large    map[string]bool // tops of trees too large for RecordRetention
	canary   int64           // the housekeeping marker's canary as this process last wrote it
	prunedAt time.Time       // when this process last pruned Function libraries
}

// EntryStatus is what a scheduler process knows of one entry.
type EntryStatus struct {
	ID        string    `json:"id"`
	Directive string    `json:"directive"`
	Cron      string    `json:"cron"`
	Queue     string    `json:"queue"`
	Next      time.Time `json:"next"`
	// LastTick is the last tick this process acted on, LastOutcome what
	// happened (started, taken, missed, error), LastThreadID the thread
	// it started (only when this process took the tick) and LastError the
	// error of a failed start.
	LastTick     time.Time `json:"last_tick,omitzero"`
	LastOutcome  string    `json:"last_outcome,omitempty"`
	LastThreadID string    `json:"last_thread_id,omitempty"`
	LastError    string    `json:"last_error,omitempty"`
}

// New returns a Scheduler over an orchestrator; Start runs it.
func New(cfg Config, o *orchestrator.Orchestrator) (*Scheduler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = o.Logger()
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	host, _ := os.Hostname()
	s := &Scheduler{cfg: cfg, o: o.Housekeeper(), log: log.With("component", "scheduler"),
		token:   fmt.Sprintf("%s:%d:%s", host, os.Getpid(), hex.EncodeToString(b[:])),
		keys:    keyspace.New(o.Namespace()),
		scripts: redisfn.NewClient(cfg.Redis),
		status:  map[string]*EntryStatus{}, large: map[string]bool{}}
	if cfg.CleanStop != nil {
		s.canary = cfg.CleanStop.Canary // a canary lower than the sealed one is a loss
	}
	if s.cfg.Bundle == nil {
		s.cfg.Bundle = func(ctx context.Context, model string) (string, error) {
			extra, err := launch.ProjectScripts(cfg.Project, model, s.log)
			if err != nil {
				return "", err
			}
			return o.BuildBundle(ctx, cfg.Project, cfg.UserDir, extra)
		}
	}
	for _, e := range cfg.Entries {
		q := e.Queue
		if q == "" {
			q = orchestrator.DefaultQueue
		}
		s.status[e.ID] = &EntryStatus{ID: e.ID, Directive: e.Directive, Cron: e.Cron, Queue: q}
	}
	if cfg.Metrics != nil {
		cfg.Metrics.ScheduledEntries.Set(float64(len(cfg.Entries)))
	}
	return s, nil
}

// Check resolves every entry against the project as it is now: the
// directive exists and its inputs are valid, and its model resolves (a
// graph entry's graph validates, and its inputs too). It
// returns the first problem, naming the entry.
func (s *Scheduler) Check(ctx context.Context) error {
	digests := map[string]string{}
	for _, e := range s.cfg.Entries {
		digest, ok := digests[e.Model]
		if !ok {
			var err error
			if digest, err = s.cfg.Bundle(ctx, e.Model); err != nil {
				return fmt.Errorf("schedule %q: bundle the project: %w", e.ID, err)
			}
			digests[e.Model] = digest
		}
		proj, err := s.o.Project(ctx, digest)
		if err != nil {
			return fmt.Errorf("schedule %q: %w", e.ID, err)
		}
		if e.Graph {
			g, err := proj.Graph(e.Directive)
			if err != nil {
				return fmt.Errorf("schedule %q: %w", e.ID, err)
			}
			if _, err := g.ValidateInputs(e.Inputs); err != nil {
				return fmt.Errorf("schedule %q: graph %s: %w", e.ID, e.Directive, err)
			}
			continue
		}
		d, err := proj.Directive(e.Directive)
		if err != nil {
			return fmt.Errorf("schedule %q: directive %s: %w", e.ID, e.Directive, err)
		}
		if _, err := directive.ValidateInputs(d, e.Inputs); err != nil {
			return fmt.Errorf("schedule %q: directive %s: %w", e.ID, e.Directive, err)
		}
		if _, err := proj.Models.ResolveModel(e.Model, d.Model.ID, d.Model.Tier, d.Model.FallbackID, d.Model.Fallback); err != nil {
			return fmt.Errorf("schedule %q: directive %s: %w", e.ID, e.Directive, err)
		}
	}
	return nil
}

// Start starts one tick loop per entry and the housekeeping loop. It does
// no I/O; call Check first to fail early on a bad entry.
func (s *Scheduler) Start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started || s.stopped {
		return errors.New("scheduler: already started")
	}
	s.started = true
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	for i := range s.cfg.Entries {
		e := &s.cfg.Entries[i]
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runEntry(ctx, e)
		}()
	}
	if s.cfg.HousekeepingInterval > 0 {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.runHousekeeping(ctx)
		}()
	}
	// Bulk operations whose runner died (bulk.go).
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.runBulks(ctx)
	}()
	// The fleet's fair shares (package admission): whichever of the
	// workers, schedulers and dev processes holds the balancer's lock.
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		admission.NewBalancer(s.o.Admission(), "scheduler-"+s.token).Run(ctx)
	}()
	s.log.Info("scheduler started", "entries", len(s.cfg.Entries), "housekeeping_interval", s.cfg.HousekeepingInterval,
		"retention", s.cfg.Retention)
	return nil
}

// Stop stops the tick loops and housekeeping, waiting for a thread start
// or housekeeping pass in progress to finish (each is bounded by
// StartTimeout). Safe to call more than once, or without Start.
func (s *Scheduler) Stop() {
	s.mu.Lock()
	s.stopped = true
	cancel := s.cancel
	s.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	s.wg.Wait()
}

// Entries returns the status of every entry, by id.
func (s *Scheduler) Entries() []EntryStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]EntryStatus, 0, len(s.status))
	for _, st := range s.status {
		out = append(out, *st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// runEntry waits for each tick of e and acts on it.
func (s *Scheduler) runEntry(ctx context.Context, e *Entry) {
	next := e.Next(s.o.Now())
	for {
		if next.IsZero() { // a spec with no next tick (Parse refuses those)
			s.log.Error("schedule has no next tick", "schedule", e.ID, "cron", e.Cron)
			return
		}
		s.setNext(e.ID, next)
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		now := s.o.Now()
		if now.Before(next) {
			continue // the timer and the clock disagree by a hair: wait again
		}
		// Ticks that all passed while this process could not act: only the
		// newest is still run.
		due := next
		for n := e.Next(due); !n.After(now); n = e.Next(n) {
			s.record(e, due, TickResult{Entry: e.ID, Tick: due, Outcome: OutcomeMissed}, nil)
			due = n
		}
		if now.Sub(due) > s.cfg.MisfireGrace {
			s.record(e, due, TickResult{Entry: e.ID, Tick: due, Outcome: OutcomeMissed}, nil)
		} else {
			// Not cancelled by Stop: a thread start is finished, not torn.
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.StartTimeout)
			_, _ = s.fire(fctx, e, due)
			cancel()
		}
		next = e.Next(due)
	}
}

func (s *Scheduler) setNext(id string, next time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.status[id].Next = next
}

// TickResult is what one scheduler process did with one tick.
type TickResult struct {
	Entry    string
	Tick     time.Time
	Outcome  string // OutcomeStarted, OutcomeTaken, OutcomeMissed or OutcomeError
	ThreadID string // the thread started, for OutcomeStarted
}

// Fire acts on one tick of an entry as the tick loop does: it takes the
// tick's lock and, if this process got it, starts the entry's thread
// through orchestrator.Start. Any number of calls for the same (entry,
// tick), from any number of processes, start one thread. tick should be
// a tick of the entry's schedule; Fire does not check.
func (s *Scheduler) Fire(ctx context.Context, entryID string, tick time.Time) (TickResult, error) {
	for i := range s.cfg.Entries {
		if s.cfg.Entries[i].ID == entryID {
			return s.fire(ctx, &s.cfg.Entries[i], tick)
		}
	}
	return TickResult{}, fmt.Errorf("schedule %q: no such entry", entryID)
}

func (s *Scheduler) fire(ctx context.Context, e *Entry, tick time.Time) (TickResult, error) {
	res := TickResult{Entry: e.ID, Tick: tick}
	id := TickThreadID(e.Directive, e.ID, tick)
	log := s.log.With("schedule", e.ID, "tick", tick.UTC().Format(time.RFC3339Nano), "thread_id", id)
	err := s.start(ctx, e, tick, id, &res)
	switch {
	case err != nil:
		res.Outcome = OutcomeError
		log.Error("scheduled thread not started", "directive", e.Directive, "error", err)
	case res.Outcome == OutcomeStarted:
		log.Info("scheduled thread started", "directive", e.Directive, "queue", e.Queue)
	default:
		log.Debug("tick taken by another scheduler")
	}
	s.record(e, tick, res, err)
	if err != nil {
		return res, fmt.Errorf("schedule %q tick %s: %w", e.ID, tick.UTC().Format(time.RFC3339), err)
	}
	return res, nil
}

// start is the tick's critical path: lock, then registry check, then
// bundle and orchestrator.Start.
func (s *Scheduler) start(ctx context.Context, e *Entry, tick time.Time, id string, res *TickResult) error {
	// The lock outlives every process's misfire grace and the gap between
	// two ticks, so a late process finds it still there.
	ttl := 2*e.Interval(tick) + s.cfg.MisfireGrace + s.cfg.StartTimeout
	ttl = min(max(ttl, time.Minute), 48*time.Hour)
	ok, err := acquire(ctx, s.cfg.Redis, TickLockKey(s.keys, e.ID, tick), s.token, ttl)
	if err != nil {
		return fmt.Errorf("tick lock: %w", err)
	}
	if !ok {
		res.Outcome = OutcomeTaken
		return nil
	}
	// Second fence, for a lock lost to a Redis failover: the tick's thread
	// id is fixed, so a thread already registered means the tick is done.
	// (orchestrator.Start on a registered id would fail after touching
	// the ledger entry of that id; this check keeps it from getting there.)
	if _, err := s.o.Record(ctx, id); err == nil {
		res.Outcome = OutcomeTaken
		return nil
	} else if !errors.Is(err, orchestrator.ErrNotFound) {
		return err
	}
	digest, err := s.cfg.Bundle(ctx, e.Model)
	if err != nil {
		return fmt.Errorf("bundle the project: %w", err)
	}
	inputs := make(map[string]any, len(e.Inputs))
	for k, v := range e.Inputs {
		inputs[k] = v
	}
	rec, err := s.o.Start(ctx, orchestrator.StartRequest{ID: id, Directive: e.Directive, Inputs: inputs, Model: e.Model,
		LimitOverrides: e.Limits, Queue: e.Queue, Bundle: digest, Graph: e.Graph, MaxSteps: e.MaxSteps,
		Tenant: e.Tenant, Priority: e.Priority, IdempotencyKey: TickIdempotencyKey(e.ID, tick), Tags: e.Tags, Notify: e.Notify, Surface: orchestrator.SurfaceSchedule})
	if err != nil {
		return err
	}
	if rec.Existing != nil && *rec.Existing {
		res.Outcome = OutcomeTaken // another scheduler's start of the tick registered it first
		return nil
	}
	res.Outcome, res.ThreadID = OutcomeStarted, rec.ThreadID
	return nil
}

// record notes a tick's outcome in the entry status and the metrics.
func (s *Scheduler) record(e *Entry, tick time.Time, res TickResult, err error) {
	s.cfg.Metrics.tick(e.ID, res.Outcome)
	if res.Outcome == OutcomeStarted {
		s.cfg.Metrics.started(e.ID, e.Directive)
	}
	if res.Outcome == OutcomeMissed {
		s.log.Warn("schedule tick missed", "schedule", e.ID, "tick", tick.UTC().Format(time.RFC3339Nano))
	}
	s.mu.Lock()
	st := s.status[e.ID]
	st.LastTick, st.LastOutcome, st.LastThreadID, st.LastError = tick, res.Outcome, res.ThreadID, ""
	if err != nil {
		st.LastError = err.Error()
	}
	s.mu.Unlock()
	if s.cfg.OnTick != nil {
		s.cfg.OnTick(res)
	}
}
