package admission

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/keyspace"
)

// Published is the policy as published in Redis (keyspace AdmPolicy):
// its body (nil: admission off), digest and version. The version grows
// by one with every publish that changes the policy and with every
// `admission off`, so a tenant's settings follow the newest a process
// read (admission.lua's sync).
type Published struct {
	Version     int64     `json:"version"`
	Digest      string    `json:"digest,omitempty"`
	Policy      *Policy   `json:"policy,omitempty"`
	PublishedAt time.Time `json:"published_at"`
	// Source is the file it was read from, as `admission apply` named it.
	Source string `json:"source,omitempty"`

	confs   sync.Map // tenant → conf JSON
	weights sync.Map // tenant → weight
}

// On reports whether admission is on: a policy is published.
func (p *Published) On() bool { return p != nil && p.Policy != nil }

// conf is the policy's settings of tenant for the tenant scripts, made
// once per tenant.
func (p *Published) conf(tenant string) string {
	if c, ok := p.confs.Load(tenant); ok {
		return c.(string)
	}
	c := p.Policy.conf(tenant)
	p.confs.Store(tenant, c)
	return c
}

// publishScript publishes a policy, or withdraws it (adm_publish.lua).
var publishScript = redisfn.New("adm_publish", "", publishLua)

//go:embed adm_publish.lua
var publishLua string

// Publish writes pol (read from source) as the fleet's policy. It
// returns what is published now, and whether that changed anything (the
// same policy published again keeps its version).
func Publish(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, pol *Policy, source string, now time.Time) (*Published, bool, error) {
	body, err := json.Marshal(pol)
	if err != nil {
		return nil, false, err
	}
	return publish(ctx, rdb, ks, pol.Digest(), string(body), source, now)
}

// Withdraw withdraws the published policy (`admission off`): admission
// is off for every process within a second.
func Withdraw(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, now time.Time) (*Published, bool, error) {
	return publish(ctx, rdb, ks, "", "", "", now)
}

func publish(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space, digest, body, source string, now time.Time) (*Published, bool, error) {
	res, err := publishScript.Run(ctx, redisfn.NewClient(rdb), []string{ks.AdmPolicy()}, digest, body,
		now.UTC().Format(time.RFC3339Nano), source).Slice()
	if err != nil {
		return nil, false, fmt.Errorf("publish admission policy: %w", err)
	}
	if len(res) != 2 {
		return nil, false, reply.Unexpected("adm_publish", res)
	}
	p, err := decodePublished(reply.String(res[1]))
	return p, reply.Int(res[0]) == 1, err
}

// Read reads the published policy: nil when none ever was, else what is
// published (Policy nil when admission is off).
func Read(ctx context.Context, rdb redis.UniversalClient, ks keyspace.Space) (*Published, error) {
	s, err := rdb.Get(ctx, ks.AdmPolicy()).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read admission policy: %w", err)
	}
	return decodePublished(s)
}

func decodePublished(s string) (*Published, error) {
	var p Published
	if err := json.Unmarshal([]byte(s), &p); err != nil {
		return nil, fmt.Errorf("published admission policy: %w", err)
	}
	return &p, nil
}

// Watcher keeps the published policy of one namespace in process,
// reading it again every PollInterval: the hot path of every activation
// asks it (Current) and nothing else while admission is off.
type Watcher struct {
	rdb redis.UniversalClient
	ks  keyspace.Space
	log *slog.Logger

	raw atomic.Value // string: the key's value last read
	cur atomic.Pointer[Published]
	// loaded is set once a read succeeded (or Set installed a policy):
	// until then nobody can tell admission on from off, and Ready reads
	// it, one caller at a time (first). readAt is when a read was last
	// started (unix ns), reading whether one is under way.
	loaded  atomic.Bool
	first   sync.Mutex
	readAt  atomic.Int64
	reading atomic.Bool
}

// PollInterval is how often a Watcher reads the policy again: a change
// reaches every process within a second.
const PollInterval = 500 * time.Millisecond

// NewWatcher returns a watcher of ks's policy; Refresh or Run reads it.
func NewWatcher(rdb redis.UniversalClient, ks keyspace.Space, log *slog.Logger) *Watcher {
	if log == nil {
		log = slog.Default()
	}
	w := &Watcher{rdb: rdb, ks: ks, log: log}
	w.raw.Store("")
	return w
}

// firstRead bounds the read of Current's first call.
const firstRead = 2 * time.Second

// Current is the policy in force: nil while admission is off (none
// published, or withdrawn). Its first call reads the policy (at most
// firstRead); after that a call that finds the policy read more than
// PollInterval ago reads it again in the background, so any process that
// asks stays within a second of a change, whether it runs Run or not.
func (w *Watcher) Current() *Published {
	if w == nil {
		return nil
	}
	if !w.loaded.Load() {
		ctx, cancel := context.WithTimeout(context.Background(), firstRead)
		if err := w.Ready(ctx); err != nil {
			w.log.Warn("admission policy not read", "error", err)
		}
		cancel()
	} else if time.Now().UnixNano()-w.readAt.Load() > int64(PollInterval) && w.reading.CompareAndSwap(false, true) {
		go func() {
			defer w.reading.Store(false)
			ctx, cancel := context.WithTimeout(context.Background(), firstRead)
			defer cancel()
			w.refreshNow(ctx)
		}()
	}
	p := w.cur.Load()
	if p == nil || p.Policy == nil {
		return nil
	}
	return p
}

// Published is what is published, on or off (nil: never, or not read).
func (w *Watcher) Published() *Published { return w.cur.Load() }

// Set installs p as the current policy without reading Redis (tests,
// and `admission apply` in its own process); the next read is due a
// PollInterval later.
func (w *Watcher) Set(p *Published) {
	w.cur.Store(p)
	w.readAt.Store(time.Now().UnixNano())
	w.loaded.Store(true)
}

// Ready reads the policy unless a read already succeeded, waiting for
// one under way, and returns the read's error: a process that could not
// read the policy cannot tell whether admission is on. Current, which
// callers ask on every activation, answers nil (off) then; what must
// not run ungranted (a worker's claim) asks Ready first.
func (w *Watcher) Ready(ctx context.Context) error {
	if w == nil || w.loaded.Load() {
		return nil
	}
	w.first.Lock()
	defer w.first.Unlock()
	if w.loaded.Load() {
		return nil
	}
	return w.Refresh(ctx)
}

// refreshNow is Refresh, its failure logged.
func (w *Watcher) refreshNow(ctx context.Context) {
	if err := w.Refresh(ctx); err != nil {
		w.log.Warn("admission policy not read", "error", err)
	}
}

// Refresh reads the policy now.
func (w *Watcher) Refresh(ctx context.Context) error {
	w.readAt.Store(time.Now().UnixNano())
	s, err := w.rdb.Get(ctx, w.ks.AdmPolicy()).Result()
	if errors.Is(err, redis.Nil) {
		s, err = "", nil
	}
	if err != nil {
		return fmt.Errorf("read admission policy: %w", err)
	}
	if s == w.raw.Load().(string) {
		w.loaded.Store(true)
		return nil
	}
	if s == "" {
		w.cur.Store(nil)
		w.raw.Store(s)
		w.loaded.Store(true)
		return nil
	}
	p, err := decodePublished(s)
	if err != nil {
		return err
	}
	w.cur.Store(p)
	w.raw.Store(s)
	w.loaded.Store(true)
	if p.Policy != nil {
		w.log.Info("admission policy in force", "version", p.Version, "digest", p.Digest)
	} else {
		w.log.Info("admission off", "version", p.Version)
	}
	return nil
}

// Run reads the policy every PollInterval until ctx ends.
func (w *Watcher) Run(ctx context.Context) {
	t := time.NewTicker(PollInterval)
	defer t.Stop()
	for {
		if err := w.Refresh(ctx); err != nil && ctx.Err() == nil {
			w.log.Warn("admission policy not read", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
