package monitor

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/ratelimit"
)

// AsynqPath is the root path asynqmon is served under.
const AsynqPath = "/asynq"

// decisionLinkPath is the path of the approval webhook's one-time
// decision links.
const decisionLinkPath = "/v1/approvals/decide"

// Config configures the monitor.
type Config struct {
	// Orch reads and acts on threads: records, budgets, transcripts,
	// queues. Required.
	Orch *orchestrator.Orchestrator
	// Redis is the Redis client of asynq's queues, which asynqmon shows
	// and acts on. Required unless AsynqHandler is set.
	Redis redis.UniversalClient
	// AsynqHandler serves asynqmon under AsynqPath. Default
	// NewAsynqmon(Redis, AsynqPath, false).
	AsynqHandler http.Handler
	// Auth guards every path but /healthz when it is enabled. Default none.
	Auth Auth
	// Hosts, when not empty, are the only host names (without port) the
	// Host header may name: an open monitor on loopback is then out of
	// reach of DNS rebinding. Default: any host.
	Hosts []string
	// Registry is what /metrics serves; New registers the monitor's
	// collector with it. Default: a new registry.
	Registry *prometheus.Registry
	// CountsTTL is how long the counts of threads by status (list page and
	// metrics) are reused, or countsDuty times as long as the last count
	// took when that is longer (a count reads every record: on a large
	// registry it is done at most a few percent of the time). Default 2s;
	// negative: counted on every request.
	CountsTTL time.Duration
	// PollInterval is how often live pages poll. Default 1s.
	PollInterval time.Duration
	// ListLimit is how many threads the list page shows when ?limit= is not
	// given. Default 100; at most 1000 either way.
	ListLimit int
	// MaxTreeNodes bounds the threads a thread page walks for its tree.
	// Default 500.
	MaxTreeNodes int
	// ReadOnly: the monitor offers and accepts no action (approve, deny,
	// send, interrupt, cancel, pause, unpause, resume, decision links).
	// Default false.
	ReadOnly bool
	// SessionKey signs the one-line outcome an action (approve, deny,
	// send, interrupt, cancel, pause, unpause, resume, fork) leaves for
	// the page it redirects to (a cookie). Default: random per process, so
	// an outcome left just before a restart is not shown; monitors behind
	// one load balancer need the same key to show each other's (`spool
	// monitor --session-key`, SPOOL_MONITOR_SESSION_KEY). The forms themselves
	// carry no token: a POST is refused unless same-origin
	// (http.CrossOriginProtection).
	SessionKey []byte
	// Project is the project directory whose rate_limits.yaml
	// (config.RateLimitsPath) the rate limits page shows, read on every
	// request as the workers read it from a thread's bundle. Default: the
	// working directory.
	Project string
	// Logger. Default the orchestrator's (Orch.Logger).
	Logger *slog.Logger
}

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.AsynqHandler == nil && c.Redis != nil {
		c.AsynqHandler = NewAsynqmon(c.Redis, AsynqPath, false)
	}
	if c.Registry == nil {
		c.Registry = prometheus.NewRegistry()
	}
	if c.CountsTTL == 0 {
		c.CountsTTL = 2 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.ListLimit == 0 {
		c.ListLimit = 100
	}
	if c.Project == "" {
		c.Project = "."
	}
	if c.MaxTreeNodes == 0 {
		c.MaxTreeNodes = 500
	}
	if c.Logger == nil && c.Orch != nil {
		c.Logger = c.Orch.Logger()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Orch == nil:
		return errors.New("monitor: Config.Orch is required")
	case c.AsynqHandler == nil:
		return errors.New("monitor: Config.Redis is required (asynqmon shows its queues), unless Config.AsynqHandler is set")
	case c.PollInterval < 100*time.Millisecond:
		return fmt.Errorf("monitor: Config.PollInterval %s is below 100ms", c.PollInterval)
	case c.ListLimit < 0 || c.ListLimit > maxListLimit:
		return fmt.Errorf("monitor: Config.ListLimit %d: want 1 to %d", c.ListLimit, maxListLimit)
	case c.MaxTreeNodes < 1:
		return fmt.Errorf("monitor: Config.MaxTreeNodes %d: want at least 1", c.MaxTreeNodes)
	}
	return validateAuth(c.Auth)
}

const maxListLimit = 1000

// Monitor serves the pages. Build it with New.
type Monitor struct {
	cfg         Config
	inspector   *asynq.Inspector
	transcripts *transcriptCache
	pages       *pages
	limiter     *ratelimit.Limiter

	key []byte // signs flash messages

	countsMu   sync.Mutex
	counts     *statusCounts
	countsTime time.Time
	countsTook time.Duration // how long the last count took
}

// New returns the monitor's handler: asynqmon under AsynqPath and spool's
// thread views (see the package doc for the routes).
func New(cfg Config) (http.Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pg, err := loadPages()
	if err != nil {
		return nil, err
	}
	m := &Monitor{
		cfg:         cfg,
		inspector:   cfg.Orch.Inspector(),
		transcripts: newTranscriptCache(cfg.Orch.NewFollower, 128),
		pages:       pg,
		limiter:     cfg.Orch.RateLimiter(),
		key:         sessionKey(cfg.SessionKey),
	}
	for _, c := range []prometheus.Collector{newCollector(m), newRateCollector(m), newAdmissionCollector(m), newWebhookCollector(m)} {
		if err := cfg.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("monitor: register metrics: %w", err)
		}
	}
	return m.handler(), nil
}

func (m *Monitor) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", m.serveList)
	mux.HandleFunc("GET /threads/{rest...}", m.serveThreadPages)
	mux.HandleFunc("POST /threads/{rest...}", m.serveThreadAction)
	mux.HandleFunc("GET /fork/{rest...}", m.serveFork)
	mux.HandleFunc("POST /fork/{rest...}", m.serveFork)
	mux.HandleFunc("POST /bulk", m.serveBulk)
	mux.HandleFunc("GET /approvals", m.serveApprovals)
	mux.HandleFunc("POST /approvals/decide", m.serveDecide)
	mux.HandleFunc("GET /api/threads/{rest...}", m.serveThreadAPI)
	mux.HandleFunc("GET /ratelimits", m.serveRateLimits)
	mux.HandleFunc("GET /api/ratelimits", m.serveRateLimits)
	mux.HandleFunc("GET /cost", m.serveCost)
	mux.HandleFunc("GET /webhooks", m.serveWebhooks)
	mux.HandleFunc("POST /webhooks/{id}/redeliver", m.serveRedeliver)
	mux.HandleFunc("GET /tenants", m.serveTenants)
	mux.HandleFunc("GET /api/tenants", m.serveTenants)
	mux.HandleFunc("GET /tenants/{tenant}", m.serveTenant)
	mux.HandleFunc("GET /api/tenants/{tenant}", m.serveTenant)
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	mux.Handle("GET /metrics", promhttp.HandlerFor(m.cfg.Registry, promhttp.HandlerOpts{}))
	if m.cfg.AsynqHandler != nil {
		mux.Handle(AsynqPath+"/", m.cfg.AsynqHandler)
		mux.Handle("GET "+AsynqPath, http.RedirectHandler(AsynqPath+"/", http.StatusMovedPermanently))
	}
	// One cross-origin check for every unsafe request (the forms,
	// asynqmon's buttons, the decision links), as the API has.
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == decisionLinkPath {
			m.linkProblem(w, r, strings.Contains(r.Header.Get("Accept"), "application/json"), http.StatusForbidden, errCrossOrigin)
			return
		}
		m.errorPage(w, r, http.StatusForbidden, errCrossOrigin)
	}))
	guarded := authMiddleware(m.cfg.Auth, cop.Handler(mux))

	root := http.NewServeMux()
	root.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	// A decision link's signed token is its credential: outside the
	// authentication, not outside the cross-origin check.
	link := cop.Handler(http.HandlerFunc(m.serveDecisionLink))
	root.Handle("GET "+decisionLinkPath, link)
	root.Handle("POST "+decisionLinkPath, link)
	root.Handle("/", guarded)
	return hostGuard(m.cfg.Hosts, securityHeaders(root))
}

// securityHeaders sets the headers every response carries; spool's own
// pages add their Content-Security-Policy when they render.
func securityHeaders(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}
