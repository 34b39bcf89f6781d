package worker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/mcpclient"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/ratelimit"
	"github.com/spool-run/spool/registry"
)

// Config configures a Worker.
type Config struct {
	// Concurrency is the number of activations run at once. Default 10.
	Concurrency int
	// Queues maps queue names to priority weights. Default
	// critical=6, default=3, low=1.
	Queues map[string]int
	// ShutdownTimeout is how long Stop lets in-flight activations finish
	// their current turn. Default 30s.
	ShutdownTimeout time.Duration
	// RecoverInterval is how often the worker looks for orphaned threads
	// (lease lapsed) and stalled wake-ups. Default 2s; negative disables.
	RecoverInterval time.Duration
	// TaskCheckInterval is how long an idle worker waits before looking
	// for new tasks again when every queue was empty. asynq's default is
	// 1s, which adds up to a second to every thread that arrives at an idle
	// worker; default 100ms (one cheap Redis script per idle worker per
	// interval).
	TaskCheckInterval time.Duration
	// DelayedTaskCheckInterval is how often the worker moves due
	// scheduled tasks (wait_threads timeouts, asynq retries of failed
	// activations) to their queue. asynq's default of 5s would let a
	// 0.5 s wait time out after up to 5.5 s; default 1s (one cheap Redis
	// script per worker per second).
	DelayedTaskCheckInterval time.Duration
	// RetryHandBack: a model call to retry after at least this long (a
	// provider's retry-after, a hook's backoff) does not wait in its
	// worker slot: the thread is checkpointed and handed back, and a task
	// scheduled for the retry time continues it on whatever worker.
	// Default 10s.
	RetryHandBack time.Duration
	// MaxToolResultBytes bounds a tool result given to the model; the full
	// result is stored as an artifact. Default 32 KiB.
	MaxToolResultBytes int
	// MaxOutputTokens is the max_tokens of each model call. Default 4096.
	MaxOutputTokens int
	// MaxResponseBytes bounds the text of a model answer kept in the
	// conversation, the transcript and the registry's result; a longer
	// answer is stored whole as an artifact and cut, with a note naming
	// it. Default 256 KiB.
	MaxResponseBytes int
	// MaxToolInputBytes bounds the input of one tool call: a larger one
	// is stored as an artifact and not run (the model gets an error
	// naming the limit). Default 1 MiB.
	MaxToolInputBytes int
	// StoragePatience is how long a blob store operation that fails is
	// tried again (with backoff) before the activation fails with it: an
	// S3 outage shorter than this delays threads instead of failing their
	// writes (blobstore.Retrying). A storage failure is never given to the
	// model as a tool error. Default 60s; negative: no retries.
	StoragePatience time.Duration
	// Provider configures the LLM providers. Default provider.ConfigFromEnv().
	Provider *provider.Config
	// NewProvider makes the provider of a thread's model. Default
	// provider.New; tests put a fake here.
	NewProvider func(model string, cfg provider.Config) (provider.Provider, error)
	// AllowShell lets the built-in tool rye/bash run commands on this
	// worker (tools.Shell); without it every call fails
	// shell_not_allowed.
	AllowShell bool
	// WebhookPoll is how often the worker looks for due webhook
	// deliveries and, when it holds the relay, relays the outboxes' run
	// events into deliveries (orchestrator webhooks). Default 500ms;
	// negative: this worker delivers no webhooks.
	WebhookPoll time.Duration
	// WebhookConcurrency bounds the deliveries one worker attempts at
	// once, apart from its activations' slots: a slow or failing endpoint
	// never takes a slot. Default 8.
	WebhookConcurrency int
	// WebhookTimeout bounds one attempt. Default 10s.
	WebhookTimeout time.Duration
	// WebhookBackoff is the wait after a delivery's first failed attempt,
	// doubling with each (orchestrator.WebhookBackoff). Default 1s.
	WebhookBackoff time.Duration
	// Host names this worker in the errors a user reads (a provider key
	// missing here). Default os.Hostname().
	Host string
	// Logger. Default the orchestrator's.
	Logger *slog.Logger
	// Metrics, or nil for none.
	Metrics *Metrics
	// MCP configures the worker's MCP servers (package mcpclient): each
	// is connected once per worker and shared by the threads that call
	// its tools. Default mcpclient.Config{} with the worker's logger.
	MCP mcpclient.Config
	// Serves, when set, is asked before each activation whether this
	// worker runs the thread: one it does not is handed back unrun (not a
	// failure; asynq offers the task again after notServedDelay, here or
	// to another worker). An --embedded run serves its own tree only.
	// Default: every thread.
	Serves func(ctx context.Context, threadID string) (bool, error)
}

// notServedDelay is how long a task handed back by Config.Serves waits
// before it is offered again.
const notServedDelay = 3 * time.Second

// WithDefaults fills unset fields: a duration or size of zero or less
// is unset, but for RecoverInterval and StoragePatience, where a negative
// one turns the feature off.
func (c Config) WithDefaults() Config {
	c.Concurrency = positiveOr(c.Concurrency, 10)
	if len(c.Queues) == 0 {
		c.Queues = map[string]int{"critical": 6, queue.DefaultQueue: 3, "low": 1}
	}
	c.ShutdownTimeout = positiveOr(c.ShutdownTimeout, 30*time.Second)
	c.RecoverInterval = cmp.Or(c.RecoverInterval, 2*time.Second)
	c.TaskCheckInterval = positiveOr(c.TaskCheckInterval, 100*time.Millisecond)
	c.DelayedTaskCheckInterval = positiveOr(c.DelayedTaskCheckInterval, time.Second)
	c.RetryHandBack = positiveOr(c.RetryHandBack, 10*time.Second)
	c.MaxToolResultBytes = positiveOr(c.MaxToolResultBytes, 32<<10)
	c.MaxOutputTokens = positiveOr(c.MaxOutputTokens, 4096)
	c.MaxResponseBytes = positiveOr(c.MaxResponseBytes, 256<<10)
	c.MaxToolInputBytes = positiveOr(c.MaxToolInputBytes, 1<<20)
	c.StoragePatience = cmp.Or(c.StoragePatience, time.Minute)
	c.WebhookPoll = cmp.Or(c.WebhookPoll, 500*time.Millisecond)
	c.WebhookConcurrency = positiveOr(c.WebhookConcurrency, 8)
	c.WebhookTimeout = positiveOr(c.WebhookTimeout, 10*time.Second)
	c.WebhookBackoff = positiveOr(c.WebhookBackoff, time.Second)
	if c.Provider == nil {
		pc := provider.ConfigFromEnv()
		c.Provider = &pc
	}
	if c.NewProvider == nil {
		c.NewProvider = provider.New
	}
	if c.Host == "" {
		c.Host, _ = os.Hostname()
	}
	return c
}

// positiveOr is v, or d when v is not above zero.
func positiveOr[T int | int64 | time.Duration](v, d T) T {
	if v <= 0 {
		return d
	}
	return v
}

// validate names the first bad field of c (after WithDefaults): every
// queue is named as queue.CheckName allows and weighs more than nothing,
// as ParseQueues makes them.
func (c Config) validate() error {
	for q, weight := range c.Queues {
		if err := queue.CheckName(q); err != nil {
			return fmt.Errorf("worker config: Queues: %w", err)
		}
		if weight <= 0 {
			return fmt.Errorf("worker config: Queues: %s=%d: the weight must be positive", q, weight)
		}
	}
	return nil
}

// maxRetryDelay caps the wait before asynq runs a failed activation again.
const maxRetryDelay = 30 * time.Second

// ParseQueues parses "q1=6,q2=3" (a bare name gets weight 1).
func ParseQueues(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, ok := strings.Cut(part, "=")
		weight := 1
		if ok {
			if _, err := fmt.Sscanf(w, "%d", &weight); err != nil || weight <= 0 {
				return nil, fmt.Errorf("queues: %q: weight must be a positive integer", part)
			}
		}
		if name == "" {
			return nil, fmt.Errorf("queues: %q: empty queue name", part)
		}
		if err := queue.CheckName(name); err != nil {
			return nil, fmt.Errorf("queues: %w", err)
		}
		out[name] = weight
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("queues: no queue named in %q", s)
	}
	return out, nil
}

// errDraining is returned by an activation that stopped after a checkpoint
// because the worker is shutting down: asynq retries the task soon, on
// whichever worker is still up.
var errDraining = errors.New("worker draining: activation handed back")

// errNotServed hands back, unrun, an activation of a thread that
// Config.Serves says this worker does not run.
var errNotServed = errors.New("thread not served by this worker: handed back")

// Worker serves thread activations from asynq queues.
type Worker struct {
	cfg     Config
	o       *orchestrator.Runtime
	log     *slog.Logger
	srv     *asynq.Server
	metrics *Metrics
	limiter *ratelimit.Limiter
	// mcp holds the MCP servers of every project the worker runs
	// threads of, started on first use; closed by Stop.
	mcp *mcpclient.Pool

	draining chan struct{}
	stopOnce sync.Once
	bg       sync.WaitGroup
	bgCancel context.CancelFunc
	// async runs deliveries that outlive an activation (approval
	// webhooks) until Stop, which cancels asyncCtx and waits for them.
	async       sync.WaitGroup
	asyncCtx    context.Context
	asyncCancel context.CancelFunc

	mu      sync.Mutex
	running map[string]map[string]*control // thread id → activation token → its control
	token   string
	// adm are the admission grants of the activations it runs.
	adm admissions
	// wrapDeps, set by tests only, replaces services of each activation
	// with fakes (deps).
	wrapDeps func(deps) deps
}

// New returns a Worker; Start runs it.
func New(cfg Config, o *orchestrator.Orchestrator) (*Worker, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = o.Logger()
	}
	if cfg.MCP.Logger == nil {
		cfg.MCP.Logger = cfg.Logger
	}
	mcp, err := mcpclient.New(cfg.MCP)
	if err != nil {
		return nil, fmt.Errorf("worker config: MCP: %w", err)
	}
	rt := o.Runtime()
	sv := rt.Services()
	if cfg.StoragePatience > 0 {
		rt = rt.WithStore(blobstore.Retrying(sv.Store, blobstore.RetryConfig{Patience: cfg.StoragePatience, Logger: cfg.Logger,
			OnRetry: func(op string, _ error) { cfg.Metrics.storageRetried(op) },
			Watch:   storeWatch{acts: sv.Activations, log: cfg.Logger}}))
	}
	w := &Worker{cfg: cfg, o: rt, log: cfg.Logger, draining: make(chan struct{}), running: map[string]map[string]*control{}}
	w.asyncCtx, w.asyncCancel = context.WithCancel(context.Background())
	w.limiter = rt.RateLimiter()
	w.token = newToken()
	w.metrics = cfg.Metrics
	w.mcp = mcp
	queues := make(map[string]int, len(cfg.Queues))
	for q, weight := range cfg.Queues {
		for _, lane := range rt.QueueLanes(q) {
			queues[lane] = weight
		}
	}
	w.srv = asynq.NewServerFromRedisClient(sv.Redis, asynq.Config{
		Concurrency:              cfg.Concurrency,
		Queues:                   queues,
		ShutdownTimeout:          cfg.ShutdownTimeout,
		TaskCheckInterval:        cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: cfg.DelayedTaskCheckInterval,
		Logger:                   asynqLogger{w.log},
		LogLevel:                 asynq.WarnLevel,
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
			if errors.Is(err, errDraining) {
				return time.Second
			}
			if errors.Is(err, errNotServed) {
				return notServedDelay
			}
			// Each attempt starts from the thread's last checkpoint, so
			// trying again is cheap; asynq's default grows past minutes.
			return min(asynq.DefaultRetryDelayFunc(n, err, t), maxRetryDelay)
		},
		IsFailure: func(err error) bool { return !errors.Is(err, errDraining) && !errors.Is(err, errNotServed) },
	})
	return w, nil
}

// Start starts serving. The order: the cancel listener, the recoverer,
// then the asynq server.
func (w *Worker) Start() error {
	ctx, cancel := context.WithCancel(context.Background())
	w.bgCancel = cancel
	sub, err := w.o.Services().Registry.SubscribeControl(ctx)
	if err != nil {
		cancel()
		return fmt.Errorf("start worker: subscribe: %w", err)
	}
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		defer sub.Close()
		w.listenControl(ctx, sub)
	}()
	w.startAdmission(ctx)
	if w.cfg.RecoverInterval > 0 {
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			w.recoverLoop(ctx)
		}()
	}
	if w.cfg.WebhookPoll > 0 {
		w.bg.Add(1)
		go func() {
			defer w.bg.Done()
			w.webhookLoop(ctx)
		}()
	}
	mux := asynq.NewServeMux()
	mux.HandleFunc(queue.TypeActivate, w.handle)
	mux.HandleFunc(admission.TypePump, w.o.Admission().HandlePump)
	if err := w.srv.Start(mux); err != nil {
		cancel()
		w.bg.Wait()
		return fmt.Errorf("start worker: %w", err)
	}
	w.log.Info("worker started", "concurrency", w.cfg.Concurrency, "queues", w.cfg.Queues)
	return nil
}

// Stop shuts down in order: new activations stop being taken, in-flight
// activations finish their current turn, checkpoint and hand the thread
// back (within ShutdownTimeout), the MCP servers stop, then the recoverer
// and cancel listener stop.
func (w *Worker) Stop() {
	w.stopOnce.Do(func() {
		close(w.draining)
		w.deregister()
		w.srv.Stop()
		w.srv.Shutdown()
		_ = w.mcp.Close()
		if w.bgCancel != nil {
			w.bgCancel()
		}
		w.bg.Wait()
		w.asyncCancel()
		w.async.Wait()
		w.log.Info("worker stopped")
	})
}

func (w *Worker) isDraining() bool {
	select {
	case <-w.draining:
		return true
	default:
		return false
	}
}

// listenControl cancels the model call of a running activation when its
// thread's cancel is requested, and starts its live transcript when
// someone follows it.
func (w *Worker) listenControl(ctx context.Context, sub *registry.Subscription) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-sub.C:
			if !ok {
				return
			}
			w.deliver(ev.ThreadID, ev.Status)
		}
	}
}

// deliver hands a control request ("cancel", "follow") to the activations
// of thread id this worker runs.
func (w *Worker) deliver(id, request string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, c := range w.running[id] {
		switch request {
		case "cancel":
			c.cancel(errCancelRequested)
		case "follow":
			c.follow()
		case "interrupt":
			c.interrupt()
		case "deltas":
			c.snapshot()
		}
	}
}

// track makes an activation reachable by the control channel until the
// returned func is called.
func (w *Worker) track(id, token string, c *control) func() {
	w.mu.Lock()
	if w.running[id] == nil {
		w.running[id] = map[string]*control{}
	}
	w.running[id][token] = c
	w.mu.Unlock()
	return func() {
		w.mu.Lock()
		delete(w.running[id], token)
		if len(w.running[id]) == 0 {
			delete(w.running, id)
		}
		w.mu.Unlock()
	}
}

// recoverLoop re-enqueues orphaned threads (running, lease lapsed) and
// waiting threads whose wake-up was lost. Every worker runs it; the task
// ids make each recovery one task.
func (w *Worker) recoverLoop(ctx context.Context) {
	t := time.NewTicker(w.cfg.RecoverInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, _, err := w.o.Recover(ctx); err != nil && ctx.Err() == nil {
				w.log.Warn("recover orphans", "error", err)
			}
		}
	}
}

// asynqLogger adapts slog to asynq's logger.
type asynqLogger struct{ l *slog.Logger }

func (a asynqLogger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a asynqLogger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a asynqLogger) Warn(args ...any)  { a.l.Warn(fmt.Sprint(args...)) }
func (a asynqLogger) Error(args ...any) { a.l.Error(fmt.Sprint(args...)) }
func (a asynqLogger) Fatal(args ...any) { a.l.Error(fmt.Sprint(args...)) }

// goAsync runs f beside the activations, until Stop: work that must not
// hold an activation's slot (an approval webhook and its retries).
func (w *Worker) goAsync(log *slog.Logger, what string, f func(context.Context) error) {
	w.async.Add(1)
	go func() {
		defer w.async.Done()
		if err := f(w.asyncCtx); err != nil && w.asyncCtx.Err() == nil {
			log.Warn(what+" failed", "error", err)
		}
	}()
}
