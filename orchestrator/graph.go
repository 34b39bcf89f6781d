package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/internal/spelling"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// Graph runs (package graph) start here as threads do, with a planner of
// their own (planGraph) and the common tail (registerAndEnqueue): a graph
// run is a registry record of kind graph, with the same ledger entry,
// spawn counter, lease and version fence as a thread.

var (
	// ErrGraphNotFound is returned when no graph of that name is in the bundle.
	ErrGraphNotFound = errors.New("graph not found")
	// ErrGraphInvalid is returned when the graph does not validate (its
	// errors follow).
	ErrGraphInvalid = errors.New("graph does not validate")
)

// Graph defaults (spec: state graphs, limits), beside resilience.yaml's:
// a graph's children cap their own turns and tokens, a graph may start
// many children and run for an hour.
const (
	GraphDefaultSpawns   = 100
	GraphDefaultDuration = 3600
)

// tagged gives err a sentinel errors.Is finds, keeping its message.
type tagged struct{ err, tag error }

func (t *tagged) Error() string   { return t.err.Error() }
func (t *tagged) Unwrap() []error { return []error{t.err, t.tag} }

// GraphName cleans a graph name as users write it: "review/pr", or its
// file ("review/pr.yaml", ".ai/graphs/review/pr.yaml").
func GraphName(name string) (string, error) {
	n := strings.TrimSpace(name)
	n = strings.TrimPrefix(n, "./")
	n = strings.TrimPrefix(n, ".ai/graphs/")
	for _, ext := range []string{".yaml", ".yml"} {
		n = strings.TrimSuffix(n, ext)
	}
	if n == "" || strings.HasPrefix(n, "/") || path.Clean(n) != n || strings.HasPrefix(n, "../") || n == ".." || strings.ContainsAny(n, "\\\x00") {
		return "", fmt.Errorf("graph name %q: want a name such as review/pr_review (its file is .ai/graphs/review/pr_review.yaml)", name)
	}
	return n, nil
}

// GraphPaths are where a graph of name is looked for in a bundle, in
// order: the project's .ai/graphs, the user space's, then the project's
// tools (a YAML file whose tool_type is graph, where the reference keeps
// graphs).
func GraphPaths(name string) []string {
	var out []string
	for _, dir := range []string{".ai/graphs/", directive.UserPrefix + "/.ai/graphs/", ".ai/tools/"} {
		for _, ext := range []string{".yaml", ".yml"} {
			out = append(out, dir+name+ext)
		}
	}
	return out
}

// FindGraph reads the file of graph name in fsys (a bundle, or a project
// directory): the first of GraphPaths that exists (a file under
// .ai/tools only when it is a graph tool).
func FindGraph(fsys fs.FS, name string) (data []byte, file string, err error) {
	for _, p := range GraphPaths(name) {
		b, err := fs.ReadFile(fsys, p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, p, err
		}
		if strings.HasPrefix(p, ".ai/tools/") && !graph.IsGraphTool(b) {
			continue
		}
		return b, p, nil
	}
	hint := ""
	if near := spelling.Nearest(name, graphNames(fsys)); near != "" && near != name {
		hint = "; did you mean " + near + "?"
	}
	return nil, "", fmt.Errorf("graph %q: %w (looked in .ai/graphs/%s.yaml, the user's ~/.ai/graphs and .ai/tools/%s.yaml)%s", name, ErrGraphNotFound, name, name, hint)
}

// graphNames are the names of the graph files under fsys's .ai/graphs
// and the user space's, for a suggestion.
func graphNames(fsys fs.FS) []string {
	var names []string
	for _, dir := range []string{".ai/graphs", directive.UserPrefix + "/.ai/graphs"} {
		_ = fs.WalkDir(fsys, dir, func(p string, de fs.DirEntry, err error) error {
			if err != nil || de.IsDir() {
				return nil
			}
			for _, ext := range []string{".yaml", ".yml"} {
				if n, ok := strings.CutSuffix(p, ext); ok {
					names = append(names, strings.TrimPrefix(n, dir+"/"))
				}
			}
			return nil
		})
	}
	return names
}

// Graph resolves a graph by name in the bundle (FindGraph), parses and
// validates it; a graph with errors is ErrGraphInvalid, naming them. The
// bundle is content addressed, so a graph is parsed once per Project;
// treat it as read-only.
func (p *Project) Graph(name string) (*graph.Graph, error) {
	n, err := GraphName(name)
	if err != nil {
		return nil, err
	}
	if g, ok := p.graphs.Load(n); ok {
		return g.(*graph.Graph), nil
	}
	data, file, err := FindGraph(p.Bundle, n)
	if err != nil {
		return nil, err
	}
	g, rep, err := graph.Parse(n, data)
	if err != nil {
		return nil, &tagged{err: fmt.Errorf("graph %s (%s): %w", n, file, err), tag: ErrGraphInvalid}
	}
	if err := rep.Err(); err != nil {
		return nil, &tagged{err: fmt.Errorf("graph %s (%s): %w", n, file, err), tag: ErrGraphInvalid}
	}
	actual, _ := p.graphs.LoadOrStore(n, g)
	return actual.(*graph.Graph), nil
}

// planGraph plans a graph run: the graph's validated inputs, its limits
// (resilience.yaml's defaults with the graph defaults over them, the
// graph's limits:, the run's overrides, capped by the parent's), its
// step limit, and its capabilities: the graph's permissions, never more
// than its starter holds.
func (o *Orchestrator) planGraph(req StartRequest, sc startContext) (registry.NewThread, error) {
	g, err := sc.proj.Graph(req.Directive)
	if err != nil {
		return registry.NewThread{}, err
	}
	inputs := req.Inputs
	if sc.prev == nil {
		if inputs, err = g.ValidateInputs(req.Inputs); err != nil {
			return registry.NewThread{}, &tagged{err: fmt.Errorf("graph %s: %w", g.Name, err), tag: directive.ErrInvalidInput}
		}
	}
	var parentLimits *thread.Resolved
	if sc.parent != nil {
		parentLimits = &sc.parent.Limits
	}
	limits, err := resolveLimits(req, sc, func() (thread.Resolved, error) {
		// A run makes no model calls: its turns and tokens, unless the
		// graph sets them, cap nothing of its children (each has its own
		// directive's); a parent's still cap them (MergeLimits).
		spawns, duration, uncapped := GraphDefaultSpawns, float64(GraphDefaultDuration), thread.Unbounded
		defaults := sc.proj.Resilience.Limits.Apply(thread.Limits{Spawns: &spawns, Duration: &duration, Turns: &uncapped, Tokens: &uncapped})
		return thread.MergeLimits(defaults, g.Limits.Limits, req.LimitOverrides, parentLimits)
	})
	if err != nil {
		return registry.NewThread{}, err
	}
	maxSteps := g.MaxSteps()
	switch {
	case sc.prev != nil && sc.prev.MaxSteps > 0:
		maxSteps = sc.prev.MaxSteps
	case req.Fork != nil && req.Fork.From.MaxSteps > 0:
		maxSteps = req.Fork.From.MaxSteps
	}
	if req.MaxSteps > 0 {
		maxSteps = req.MaxSteps
	}
	if maxSteps > graph.MaxStepsCap {
		return registry.NewThread{}, &tagged{err: fmt.Errorf("limit max_steps=%d: at most %d", maxSteps, graph.MaxStepsCap), tag: directive.ErrInvalidInput}
	}
	caps := append([]string(nil), g.Permissions...)
	if sc.parent != nil {
		caps = thread.Intersect(caps, sc.parent.Capabilities)
	}
	return registry.NewThread{Directive: g.Name, Kind: registry.KindGraph, GraphDigest: g.Digest(), MaxSteps: maxSteps,
		Limits: limits, Capabilities: caps, Inputs: inputs, Fields: req.Fields}, nil
}

// RunSpend is the spend a list shows for rec: a thread's own; a graph
// run's its subtree's (the run calls no model, its children spend), read
// live from the ledger while the run goes on, as its record holds it once
// it ended (its end writes SubtreeSpend there).
func (o *Orchestrator) RunSpend(ctx context.Context, rec *registry.Record) float64 {
	if rec.IsGraph() && !rec.Status.Terminal() {
		if spend, err := o.SubtreeSpend(ctx, rec); err == nil {
			return spend
		}
	}
	return rec.Cost.Spend
}

// SubtreeSpend is what rec's ledger entry (its chain's) and every entry
// below it have spent: a graph run's spend, children included.
func (o *Orchestrator) SubtreeSpend(ctx context.Context, rec *registry.Record) (float64, error) {
	e, err := o.ledger.Get(ctx, rec.LedgerID())
	if err != nil {
		return 0, err
	}
	return e.Actual, nil
}
