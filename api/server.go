package api

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/spool-run/spool/httpauth"
	"github.com/spool-run/spool/orchestrator"
)

// Config configures the API.
type Config struct {
	// Orch runs the operations. Required (from orchestrator.New).
	Orch *orchestrator.Orchestrator
	// Project is the project root that root threads are started from:
	// their bundle is its .ai/ (launch.Start). Required.
	Project string
	// UserDir is the user space bundled beside the project (the home
	// directory). Default: none.
	UserDir string
	// Auth guards every route but /healthz and /v1/openapi.json when it is
	// enabled. Default none.
	Auth httpauth.Auth
	// Tokens, when set, are the bearer tokens every request must carry
	// one of (Auth's credential still passes, unbound), each bound to a
	// tenant or not (tokens.go). Default none.
	Tokens []Token
	// Tenants answers the tenant routes. Default: admission's standing
	// and settings of each tenant (AdmissionTenants).
	Tenants TenantService
	// Hosts, when not empty, are the only host names the Host header may
	// name (httpauth.LoopbackHosts for a loopback address). Default any.
	Hosts []string
	// ListLimit is how many threads a list returns when ?limit= is not
	// given. Default 100; at most MaxListLimit either way.
	ListLimit int
	// MaxTreeNodes bounds the threads a tree walks. Default 1000.
	MaxTreeNodes int
	// FollowInterval is how often an event stream reads the transcript's
	// durable segments. Default 500ms.
	FollowInterval time.Duration
	// Heartbeat is how often an idle event stream sends a comment line.
	// Default 15s.
	Heartbeat time.Duration
	// MaxStreams is the most event streams the server holds open at
	// once, and MaxStreamsPerClient the most one client does (its basic
	// auth user, else its address); a stream past either is refused
	// with 429 too_many_streams. Defaults 256 and 32.
	MaxStreams, MaxStreamsPerClient int
	// Registry, when set, gets the API's request metrics
	// (spool_api_requests_total, spool_api_request_seconds). Default none.
	Registry prometheus.Registerer
	// Logger. Default the orchestrator's (Orch.Logger).
	Logger *slog.Logger
}

// MaxListLimit is the most threads one list returns.
const MaxListLimit = 1000

// WithDefaults fills unset fields.
func (c Config) WithDefaults() Config {
	if c.ListLimit == 0 {
		c.ListLimit = 100
	}
	if c.MaxTreeNodes == 0 {
		c.MaxTreeNodes = 1000
	}
	if c.FollowInterval == 0 {
		c.FollowInterval = 500 * time.Millisecond
	}
	if c.Heartbeat == 0 {
		c.Heartbeat = 15 * time.Second
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 256
	}
	if c.MaxStreamsPerClient == 0 {
		c.MaxStreamsPerClient = 32
	}
	if c.Logger == nil && c.Orch != nil {
		c.Logger = c.Orch.Logger()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Tenants == nil && c.Orch != nil {
		c.Tenants = AdmissionTenants(c.Orch)
	}
	return c
}

func (c Config) validate() error {
	switch {
	case c.Orch == nil:
		return errors.New("api: Config.Orch is required")
	case c.Project == "":
		return errors.New("api: Config.Project is required")
	case c.ListLimit < 1 || c.ListLimit > MaxListLimit:
		return fmt.Errorf("api: Config.ListLimit %d: want 1 to %d", c.ListLimit, MaxListLimit)
	case c.MaxTreeNodes < 1:
		return fmt.Errorf("api: Config.MaxTreeNodes %d: want at least 1", c.MaxTreeNodes)
	case c.FollowInterval < 10*time.Millisecond:
		return fmt.Errorf("api: Config.FollowInterval %s is below 10ms", c.FollowInterval)
	case c.Heartbeat < 0:
		return fmt.Errorf("api: Config.Heartbeat %s is negative", c.Heartbeat)
	case c.MaxStreams < 1:
		return fmt.Errorf("api: Config.MaxStreams %d: want at least 1", c.MaxStreams)
	case c.MaxStreamsPerClient < 1:
		return fmt.Errorf("api: Config.MaxStreamsPerClient %d: want at least 1", c.MaxStreamsPerClient)
	}
	if err := c.Auth.Validate(); err != nil {
		return fmt.Errorf("api: %w", err)
	}
	return nil
}

// server answers the routes.
type server struct {
	cfg     Config
	log     *slog.Logger
	metrics *metrics // nil: none
	streams *streamGate
}

// handlerFunc answers a route; id is the thread's ("" on routes
// without one).
type handlerFunc func(s *server, w http.ResponseWriter, r *http.Request, id string)

// route is one operation: a method on a path, spelled as in the OpenAPI
// document (/v1/threads/{id}/tree).
type route struct {
	Method, Path string
	handle       handlerFunc
}

// threadPrefix is the path of a thread, before its id.
const threadPrefix = "/v1/threads/"

// routes is the API. The OpenAPI document describes exactly these
// (TestOpenAPIDocumentMatchesRoutes).
var routes = []route{
	{http.MethodPost, "/v1/threads", (*server).run},
	{http.MethodGet, "/v1/threads", (*server).list},
	{http.MethodGet, "/v1/approvals", (*server).approvals},
	{http.MethodGet, "/v1/threads/{id}", (*server).show},
	{http.MethodGet, "/v1/threads/{id}/tree", (*server).tree},
	{http.MethodGet, "/v1/threads/{id}/chain", (*server).chain},
	{http.MethodGet, "/v1/threads/{id}/budget", (*server).budget},
	{http.MethodGet, "/v1/threads/{id}/events", (*server).events},
	{http.MethodPost, "/v1/threads/{id}/cancel", (*server).cancel},
	{http.MethodPost, "/v1/threads/{id}/pause", (*server).pause},
	{http.MethodPost, "/v1/threads/{id}/unpause", (*server).unpause},
	{http.MethodPost, "/v1/threads/{id}/resume", (*server).resume},
	{http.MethodPost, "/v1/threads/{id}/approve", (*server).approve},
	{http.MethodPost, "/v1/threads/{id}/deny", (*server).deny},
	{http.MethodPost, "/v1/threads/{id}/send", (*server).send},
	{http.MethodPost, "/v1/threads/{id}/interrupt", (*server).interrupt},
	{http.MethodPost, "/v1/threads/{id}/fork", (*server).fork},
	{http.MethodPost, "/v1/graphs", (*server).runGraph},
	{http.MethodGet, "/v1/graphs", (*server).listGraphs},
	{http.MethodGet, "/v1/graphs/{id}", (*server).showGraph},
	{http.MethodGet, "/v1/graphs/{id}/state", (*server).graphState},
	{http.MethodPost, "/v1/graphs/{id}/cancel", (*server).cancelGraph},
	{http.MethodPost, "/v1/graphs/{id}/pause", (*server).pauseGraph},
	{http.MethodPost, "/v1/graphs/{id}/unpause", (*server).unpauseGraph},
	{http.MethodPost, "/v1/graphs/{id}/resume", (*server).resumeGraph},
	{http.MethodPost, "/v1/graphs/{id}/fork", (*server).forkGraph},
	{http.MethodPost, "/v1/graphs/{id}/messages", (*server).sendGraphMessage},
	{http.MethodGet, "/v1/tenants", (*server).tenants},
	{http.MethodGet, "/v1/tenants/{tenant}", (*server).tenant},
	{http.MethodPatch, "/v1/tenants/{tenant}", (*server).setTenant},
	{http.MethodGet, "/v1/admission", (*server).admission},
	{http.MethodGet, "/v1/cost", (*server).cost},
	{http.MethodPost, "/v1/bulk", (*server).startBulk},
	{http.MethodGet, "/v1/bulk/{id}", (*server).showBulk},
	{http.MethodGet, "/v1/webhooks/deliveries", (*server).deliveries},
	{http.MethodPost, "/v1/webhooks/deliveries/{id}/redeliver", (*server).redeliver},
}

// Routes lists the API's operations as "METHOD /path" in OpenAPI's
// spelling (/v1/threads/{id}/tree), those that need no credential
// included (health, the document, and the approval webhook's one-time
// links, whose signed token is their credential).
func Routes() []string {
	out := []string{"GET /healthz", "GET /v1/openapi.json", "GET /v1/approvals/decide", "POST /v1/approvals/decide"}
	for _, rt := range routes {
		out = append(out, rt.Method+" "+rt.Path)
	}
	sort.Strings(out)
	return out
}

// New returns the API's handler.
func New(cfg Config) (http.Handler, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	s := &server{cfg: cfg, log: cfg.Logger, streams: newStreamGate(cfg.MaxStreams, cfg.MaxStreamsPerClient)}
	if cfg.Registry != nil {
		m, err := newMetrics(cfg.Registry)
		if err != nil {
			return nil, fmt.Errorf("api metrics: %w", err)
		}
		s.metrics = m
	}
	return s.handler(), nil
}

func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range []string{"/v1/threads", "/v1/approvals", "/v1/graphs", "/v1/tenants", "/v1/admission", "/v1/cost", "/v1/bulk", deliveriesPath} {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) { s.dispatch(w, r, "", p) })
	}
	mux.HandleFunc(threadPrefix+"{rest...}", s.idRoute(threadPrefix, "thread"))
	mux.HandleFunc(graphPrefix+"{rest...}", s.idRoute(graphPrefix, "run"))
	mux.HandleFunc(tenantPrefix+"{rest...}", s.segmentRoute(tenantPrefix+"{tenant}"))
	mux.HandleFunc(bulkPrefix+"{rest...}", s.segmentRoute(bulkPrefix+"{id}"))
	mux.HandleFunc(deliveriesPath+"/{rest...}", s.deliveryRoute)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem(http.StatusNotFound, "not_found", "no route %s", r.URL.Path))
	})
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, r, problem(http.StatusForbidden, "forbidden", "cross-origin request refused"))
	}))
	deny := func(w http.ResponseWriter, r *http.Request, msg string) {
		writeProblem(w, r, problem(http.StatusUnauthorized, "unauthorized", "%s", msg))
	}
	guarded := httpauth.Guard{Auth: s.cfg.Auth, Realm: "spool api", Deny: deny}.Handler(cop.Handler(mux))
	if len(s.cfg.Tokens) > 0 {
		guarded = tokenGuard{auth: s.cfg.Auth, tokens: s.cfg.Tokens, deny: deny}.Handler(cop.Handler(mux))
	}

	root := http.NewServeMux()
	root.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		if !allow(w, r, http.MethodGet) {
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	root.HandleFunc("/v1/openapi.json", serveOpenAPI)
	root.Handle("/v1/approvals/decide", cop.Handler(http.HandlerFunc(s.decisionLink)))
	root.Handle("/", guarded)
	return httpauth.HostGuard(s.cfg.Hosts, func(w http.ResponseWriter, r *http.Request, msg string) {
		writeProblem(w, r, problem(http.StatusMisdirectedRequest, "host_not_allowed", "%s", msg))
	}, headers(root))
}

// headers sets the headers every response carries.
func headers(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		next.ServeHTTP(w, r)
	})
}

// allow answers a request of another method than those given 405.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	writeProblem(w, r, problem(http.StatusMethodNotAllowed, "method_not_allowed", "%s %s: allowed %s", r.Method, r.URL.Path, strings.Join(methods, ", ")))
	return false
}

// idRoute splits prefix{rest...} (threadPrefix, graphPrefix) into the
// thread's or run's id and the route: the last segment names one (an id
// never ends in one: ids end in -<time>-<random>), else the route is the
// id's own. The id may be URL-escaped or not. noun names the id a path
// without one lacks ("thread", "run").
func (s *server) idRoute(prefix, noun string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		rest := r.PathValue("rest")
		id, path := rest, prefix+"{id}"
		if i := strings.LastIndexByte(rest, '/'); i >= 0 && isRouteAction(prefix, rest[i+1:]) {
			id, path = rest[:i], path+rest[i:]
		}
		if id == "" {
			writeProblem(w, r, problem(http.StatusNotFound, "not_found", "no %s id in %s", noun, r.URL.Path))
			return
		}
		s.dispatch(w, r, id, path)
	}
}

// isRouteAction reports whether seg is the last segment of a route under
// prefix (threadPrefix, graphPrefix).
func isRouteAction(prefix, seg string) bool {
	for _, rt := range routes {
		if a, ok := strings.CutPrefix(rt.Path, prefix+"{id}/"); ok && a == seg {
			return true
		}
	}
	return false
}

// dispatch runs the route of (path, method), or answers 405.
func (s *server) dispatch(w http.ResponseWriter, r *http.Request, id, path string) {
	var methods []string
	for _, rt := range routes {
		if rt.Path != path {
			continue
		}
		if rt.Method == r.Method {
			s.metrics.observe(path, w, r, func(w http.ResponseWriter) { rt.handle(s, w, r, id) })
			return
		}
		methods = append(methods, rt.Method)
	}
	allow(w, r, methods...)
}
