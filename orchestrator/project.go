package orchestrator

import (
	"context"
	"fmt"
	"io/fs"
	"sync"

	lru "github.com/hashicorp/golang-lru/v2"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/hooks"
)

// Project is a loaded bundle: the snapshot of a project's .ai/ items that a
// thread tree runs against, with its configuration parsed once. It is
// shared by every goroutine that runs a thread of the bundle; do not copy
// it.
type Project struct {
	Digest       string
	Bundle       *directive.Bundle
	Resilience   config.Resilience
	Coordination config.Coordination
	Models       config.Models
	// Approvals gates tool calls on a person's decision; nil: none.
	Approvals *config.Approvals
	// RateLimits holds model calls to fleet-wide limits; nil: none.
	RateLimits *config.RateLimits
	// MCP declares the MCP servers whose tools threads may call; nil:
	// none.
	MCP *config.MCP
	// Webhooks are the endpoints told of run events (webhooks.yaml); nil:
	// none.
	Webhooks *config.Webhooks
	// Graphs bounds and paces graph runs (graphs.yaml, else defaults).
	Graphs       config.Graphs
	Pricing      []byte // .ai/config/agent/pricing.yaml, if any
	UserHooks    []hooks.Hook
	ProjectHooks []hooks.Hook

	// directives caches Directive's parsed directives by clean name
	// (*directive.Directive values).
	directives sync.Map
	// graphs caches Graph's parsed graphs by clean name.
	graphs sync.Map
}

// Directive resolves a directive by name in the bundle (project, user, then
// system space). The bundle is content-addressed, so a directive is parsed
// once per Project and every later call returns the same
// *directive.Directive, shared with every caller: treat it as read-only.
// (No caller writes to it: they read its fields, copy Permissions before
// narrowing them, and hooks.Merge copies the Hook values it adjusts.)
// Errors are not cached: a name that fails (invalid, not found, or a
// directive that does not parse) is resolved again on the next call, so
// that names from model tool calls cannot grow the cache; only names that
// resolve, at most one per directive file, are kept.
func (p *Project) Directive(name string) (*directive.Directive, error) {
	// Resolve depends on the name only through its clean form (which is
	// not itself always clean: "x.md.md" is "x.md"), so that is the key.
	key, err := directive.CleanName(name)
	if err != nil {
		return nil, err
	}
	if d, ok := p.directives.Load(key); ok {
		return d.(*directive.Directive), nil
	}
	d, _, err := p.Bundle.Resolver().Resolve(name)
	if err != nil {
		return nil, err
	}
	// Callers that raced on the first resolution all get the one stored.
	actual, _ := p.directives.LoadOrStore(key, d)
	return actual.(*directive.Directive), nil
}

// ReadFile reads a file of the bundle, including extra files such as
// provider scripts.
func (p *Project) ReadFile(name string) ([]byte, error) {
	if b, ok := p.Bundle.Extra(name); ok {
		return b, nil
	}
	return fs.ReadFile(p.Bundle, name)
}

// BuildBundle snapshots a project's .ai/ items (and userDir's; "" skips
// them) with extra files (provider scripts, by their paths in the bundle)
// into the blob store, content-addressed, and returns the digest for
// StartRequest.Bundle (directive.BuildBundle).
func (o *Orchestrator) BuildBundle(ctx context.Context, project, userDir string, extra map[string][]byte) (string, error) {
	return directive.BuildBundle(ctx, o.store, project, userDir, extra)
}

// LoadBundle reads the bundle with the given digest as it is stored,
// unparsed and uncached (Project parses and caches it).
func (o *Orchestrator) LoadBundle(ctx context.Context, digest string) (*directive.Bundle, error) {
	return directive.LoadBundle(ctx, o.store, digest)
}

// Project loads (and caches) the bundle with the given digest.
func (o *Orchestrator) Project(ctx context.Context, digest string) (*Project, error) {
	if p, ok := o.projects.get(digest); ok {
		return p, nil
	}
	b, err := directive.LoadBundle(ctx, o.store, digest)
	if err != nil {
		return nil, fmt.Errorf("load bundle %s: %w", digest, err)
	}
	p := &Project{Digest: digest, Bundle: b}
	if p.Resilience, err = config.LoadResilience(b); err != nil {
		return nil, err
	}
	if p.Coordination, err = config.LoadCoordination(b); err != nil {
		return nil, err
	}
	if p.Approvals, err = config.LoadApprovals(b); err != nil {
		return nil, err
	}
	if p.RateLimits, err = config.LoadRateLimits(b); err != nil {
		return nil, err
	}
	if p.MCP, err = config.LoadMCP(b); err != nil {
		return nil, err
	}
	if p.Models, err = config.LoadModels(b); err != nil {
		return nil, err
	}
	if p.Webhooks, err = config.LoadWebhooks(b); err != nil {
		return nil, err
	}
	if p.Graphs, err = config.LoadGraphs(b); err != nil {
		return nil, err
	}
	if data, err := fs.ReadFile(b, ".ai/config/agent/pricing.yaml"); err == nil {
		p.Pricing = data
	}
	if p.ProjectHooks, err = hooks.Load(b, hooks.LayerProject); err != nil {
		return nil, err
	}
	if p.UserHooks, err = hooks.Load(b.UserFS(), hooks.LayerUser); err != nil {
		return nil, err
	}
	o.projects.put(digest, p)
	return p, nil
}

// projectCache keeps the most recently used loaded projects by digest (an
// LRU of hashicorp/golang-lru, safe for concurrent use).
type projectCache struct{ *lru.Cache[string, *Project] }

func newProjectCache(size int) *projectCache {
	c, err := lru.New[string, *Project](size)
	if err != nil {
		panic(err) // only for a size <= 0: a programming error
	}
	return &projectCache{c}
}

func (c *projectCache) get(d string) (*Project, bool) { return c.Get(d) }

func (c *projectCache) put(d string, p *Project) { c.Add(d, p) }
