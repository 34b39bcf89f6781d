package graph

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/internal/spelling"
	"github.com/spool-run/spool/thread"
)

// Known keys, in the order the canonical form writes them.
var (
	topKeys    = []string{"version", "description", "permissions", "limits", "inputs", "config_schema", "env_requires", "config", "tool_type", "executor_id", "category", "tool_id"}
	configKeys = []string{"start", "nodes", "max_steps", "on_error", "state", "hooks", "max_concurrency"}
	limitKeys  = append(append([]string{}, thread.LimitNames...), "max_steps")

	commonNodeKeys = []string{"type", "node_type", "description", "next", "on_error", "timeout", "retry", "env_requires"}
	kindNodeKeys   = map[string][]string{
		KindAction:      {"action", "assign"},
		KindForeach:     {"over", "as", "parallel", "max_concurrency", "max_items", "on_item_error", "min_success", "collect", "action", "assign"},
		KindGate:        {"assign"},
		KindReturn:      {"output"},
		KindApproval:    {"prompt", "show", "on_timeout", "assign"},
		KindWait:        {"threads", "mode", "on_child_error", "collect", "assign"},
		KindSleep:       {"for", "until", "assign"},
		KindWaitMessage: {"name", "schema", "on_timeout", "assign"},
	}
	// ignoredNodeKeys are reference keys Spool accepts and does not act on.
	ignoredNodeKeys = map[string]string{
		"cache":        "result caching is not supported; the node always runs",
		"cache_result": "result caching is not supported; the node always runs",
		"comment":      "use description",
	}
	retryKeys = []string{"attempts", "backoff", "max_backoff"}
	edgeKeys  = []string{"when", "to"}
	hookKeys  = []string{"id", "event", "condition", "action", "description"}
	condKeys  = []string{"path", "op", "value", "any", "all", "not"}
)

func allNodeKeys() []string {
	out := append([]string{}, commonNodeKeys...)
	for _, k := range Kinds {
		for _, key := range kindNodeKeys[k] {
			if !slices.Contains(out, key) {
				out = append(out, key)
			}
		}
	}
	return out
}

// Parse reads a graph file in the canonical form or the reference's form
// (section 3), normalizes it and validates it. data that is not YAML is an
// error naming the line. Everything else that is wrong (unknown keys, bad
// values, structural errors) is in the Report, with the warnings, so that
// `graph validate` lists it all; the returned graph is then as complete as
// the file allowed.
func Parse(name string, data []byte) (*Graph, Report, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, Report{}, fmt.Errorf("graph %s: %w", name, err)
	}
	p := &reader{budget: maxValueNodes}
	g := &Graph{Name: name, OnError: OnErrorFail, MaxConcurrency: DefaultMaxConcurrency}
	p.graph(g, &doc)
	g.parsed = p.r
	return g, g.Validate(), nil
}

// IsGraphTool reports whether data, a YAML file found under .ai/tools, is
// a graph: its top-level tool_type is "graph".
func IsGraphTool(data []byte) bool {
	var doc struct {
		ToolType any `yaml:"tool_type"`
	}
	if yaml.Unmarshal(data, &doc) != nil {
		return false
	}
	s, ok := doc.ToolType.(string)
	return ok && strings.TrimSpace(s) == "graph"
}

// graph reads the whole file into g: each top-level key, then what
// depends on several of them (config.max_steps over limits.max_steps, and
// the inputs schema from inputs or its alias config_schema).
func (p *reader) graph(g *Graph, doc *yaml.Node) {
	if isNull(doc) {
		p.errorf("", "", nil, "the file is empty")
		return
	}
	pairs, ok := p.mapping(doc, "", "")
	if !ok {
		return
	}
	var t topKeysRead
	for _, e := range pairs {
		p.topKey(g, e, &t)
	}
	if t.configMaxSteps != nil {
		g.Limits.MaxSteps = t.configMaxSteps
		g.maxStepsKey = "config.max_steps"
	}
	p.inputs(g, t.schema, t.schemaAlias)
}

// topKeysRead holds the top-level values that graph settles only once
// every key is read.
type topKeysRead struct {
	schema, schemaAlias *yaml.Node // inputs and config_schema
	configMaxSteps      *int
}

// topKey reads the top-level key e into g, or into t when it must wait
// for the others.
func (p *reader) topKey(g *Graph, e kv, t *topKeysRead) {
	switch e.key {
	case "version":
		g.Version = p.str(e.v, "", e.key)
	case "description":
		g.Description = p.str(e.v, "", e.key)
	case "permissions":
		g.Permissions = p.strList(e.v, "", e.key)
		if g.Permissions == nil {
			g.Permissions = []string{}
		}
	case "limits":
		p.limits(g, e.v)
	case "inputs":
		t.schema = e.v
	case "config_schema":
		t.schemaAlias = e.v
	case "env_requires":
		g.EnvRequires = p.strList(e.v, "", e.key)
	case "config":
		t.configMaxSteps = p.config(g, e.v)
	case "tool_type":
		if s := p.str(e.v, "", e.key); s != "graph" {
			p.errorf("", e.key, e.v, "must be `graph` (this file is not a graph)")
		}
		p.meta(g, e.key, p.str(e.v, "", e.key))
	case "executor_id", "category":
		p.meta(g, e.key, p.str(e.v, "", e.key))
	case "tool_id":
		p.warnf("", e.key, e.k, "ignored (a reference key: the graph's name comes from its path)")
	default:
		p.errorf("", e.key, e.k, "%s", unknownTopKey(e.key))
	}
}

// unknownTopKey is the message for a top-level key nobody knows, with
// what a graph written from memory most often got wrong: its name, or
// config's keys written at the top.
func unknownTopKey(k string) string {
	switch {
	case k == "name":
		return "unknown key `name`: a graph's name comes from its path (.ai/graphs/NAME.yaml)"
	case slices.Contains(configKeys, k):
		return "unknown key `" + k + "` at the top: it goes under `config:`"
	}
	return unknownKey(k, topKeys)
}

// inputs reads the inputs schema, written as inputs or as its alias
// config_schema; both is an error, and inputs wins.
func (p *reader) inputs(g *Graph, schema, alias *yaml.Node) {
	switch {
	case schema != nil && alias != nil:
		p.errorf("", "config_schema", alias, "give the inputs schema once: `inputs` and its alias `config_schema` are both set")
		fallthrough
	case schema != nil:
		g.Inputs = p.schema(schema, "inputs")
	case alias != nil:
		g.Inputs = p.schema(alias, "config_schema")
	}
}

func (p *reader) meta(g *Graph, key, val string) {
	if g.Meta == nil {
		g.Meta = map[string]string{}
	}
	g.Meta[key] = val
}

func (p *reader) schema(n *yaml.Node, key string) *Schema {
	if isNull(n) {
		return nil
	}
	s, err := ParseSchema(p.value(n, "", key))
	if err != nil {
		p.errorf("", key, n, "%v", err)
		return nil
	}
	return s
}

// limits reads the top-level limits: max_steps for the graph itself, the
// others as the run's thread limits.
func (p *reader) limits(g *Graph, n *yaml.Node) {
	pairs, _ := p.mapping(n, "", "limits")
	for _, e := range pairs {
		key := "limits." + e.key
		if e.key == "max_steps" {
			v := p.integer(e.v, "", key)
			g.Limits.MaxSteps = &v
			continue
		}
		if !slices.Contains(limitKeys, e.key) {
			p.errorf("", key, e.k, "%s", unknownKey(e.key, limitKeys))
			continue
		}
		v := p.value(e.v, "", key)
		if e.key == "duration" {
			v = durationSeconds(v)
		}
		if err := g.Limits.SetLimit(e.key, v); err != nil {
			p.errorf("", key, e.v, "%v", err)
		}
	}
}

// durationSeconds turns a duration written as text ("90s") into its
// seconds, the unit limits.duration keeps; anything else is left for
// SetLimit to judge.
func durationSeconds(v any) any {
	if s, ok := v.(string); ok {
		if d, err := parseDuration(s); err == nil {
			return d.Seconds()
		}
	}
	return v
}

// config reads config:, returning config.max_steps when it is set.
func (p *reader) config(g *Graph, n *yaml.Node) *int {
	pairs, _ := p.mapping(n, "", "config")
	var maxSteps *int
	for _, e := range pairs {
		key := "config." + e.key
		switch e.key {
		case "start":
			g.Start = p.str(e.v, "", key)
		case "nodes":
			p.nodes(g, e.v)
		case "max_steps":
			v := p.integer(e.v, "", key)
			maxSteps = &v
		case "on_error":
			if s := p.str(e.v, "", key); s != "" {
				g.OnError = s
			}
		case "state":
			g.State = p.object(e.v, "", key)
		case "hooks":
			p.hooks(g, e.v)
		case "max_concurrency":
			g.MaxConcurrency = p.integer(e.v, "", key)
		default:
			msg := unknownKey(e.key, configKeys)
			if slices.Contains(topKeys, e.key) {
				msg = "`" + e.key + "` belongs at the top level of the file, not under config"
			}
			p.errorf("", key, e.k, "%s", msg)
		}
	}
	return maxSteps
}

func (p *reader) nodes(g *Graph, n *yaml.Node) {
	pairs, ok := p.mapping(n, "", "config.nodes")
	if !ok {
		return
	}
	g.Nodes = make(map[string]*Node, len(pairs))
	for _, e := range pairs {
		g.Nodes[e.key] = p.node(e.key, e.v)
		g.Order = append(g.Order, e.key)
	}
}

// node reads one node: its kind first (type or node_type), which decides
// the defaults and which keys are allowed, then each allowed key.
func (p *reader) node(name string, n *yaml.Node) *Node {
	nd := &Node{Name: name, Kind: KindAction}
	if isNull(n) || resolve(n).Kind != yaml.MappingNode {
		p.errorf(name, "", n, "a node must be a mapping, not %s", yamlKind(n))
		return nd
	}
	pairs, _ := p.mapping(n, name, "")
	valid := p.nodeKind(nd, pairs)
	kindDefaults(nd)
	for _, e := range pairs {
		if !p.nodeKeyAllowed(nd, valid, e) {
			continue
		}
		p.nodeKey(nd, e)
	}
	return nd
}

// nodeKind reads nd's kind from type or node_type (which must agree when
// both are given; an absent kind is an action) and reports whether it is
// a known kind, recording the error when not.
func (p *reader) nodeKind(nd *Node, pairs []kv) bool {
	var kindKey *kv
	for i, e := range pairs {
		if e.key != "type" && e.key != "node_type" {
			continue
		}
		k := p.str(e.v, nd.Name, e.key)
		if kindKey != nil && k != nd.Kind {
			p.errorf(nd.Name, e.key, e.k, "`type` and `node_type` disagree (%s, %s)", nd.Kind, k)
		}
		kindKey = &pairs[i]
		nd.Kind = k
	}
	if nd.Kind == "" {
		nd.Kind = KindAction
	}
	if slices.Contains(Kinds, nd.Kind) {
		return true
	}
	msg := fmt.Sprintf("unknown node kind `%s`", nd.Kind)
	if s := spelling.Nearest(nd.Kind, Kinds); s != "" {
		msg += fmt.Sprintf(" (did you mean `%s`?)", s)
	}
	p.errorf(nd.Name, kindKey.key, kindKey.v, "%s (known: %s)", msg, strings.Join(Kinds, ", "))
	return false
}

// kindDefaults sets the defaults of nd's kind, before its keys are read
// over them.
func kindDefaults(nd *Node) {
	switch nd.Kind {
	case KindForeach:
		nd.As, nd.OnItemError = "item", OnErrorFail
	case KindApproval:
		nd.OnTimeout = "deny"
	case KindWait:
		nd.Mode, nd.OnChildError = "all", OnErrorFail
	}
}

// nodeKeyAllowed reports whether e may appear on nd, recording why not.
func (p *reader) nodeKeyAllowed(nd *Node, validKind bool, e kv) bool {
	if why, ok := ignoredNodeKeys[e.key]; ok {
		p.warnf(nd.Name, e.key, e.k, "ignored: %s", why)
		return false
	}
	if slices.Contains(commonNodeKeys, e.key) || !validKind && slices.Contains(allNodeKeys(), e.key) {
		return true
	}
	if slices.Contains(kindNodeKeys[nd.Kind], e.key) {
		return true
	}
	var owners []string
	for _, k := range Kinds {
		if slices.Contains(kindNodeKeys[k], e.key) {
			owners = append(owners, k)
		}
	}
	switch {
	case e.key == "remote":
		p.errorf(nd.Name, e.key, e.k, "remote execution (the reference's `remote`) is not supported")
	case len(owners) > 0:
		p.errorf(nd.Name, e.key, e.k, "not valid on %s node (it belongs to %s nodes)", article(nd.Kind), strings.Join(owners, ", "))
	default:
		p.errorf(nd.Name, e.key, e.k, "%s", unknownKey(e.key, append(append([]string{}, commonNodeKeys...), kindNodeKeys[nd.Kind]...)))
	}
	return false
}

func article(kind string) string {
	if kind != "" && strings.ContainsRune("aeiou", rune(kind[0])) {
		return "an " + kind
	}
	return "a " + kind
}

// nodeKey reads one key of a node into nd; nodeKeyAllowed has already
// checked that the key belongs on it.
func (p *reader) nodeKey(nd *Node, e kv) {
	if read := nodeKeyReaders[e.key]; read != nil {
		read(p, nd, e.key, e.v)
	}
}

// nodeKeyReaders read each node key into the node. type and node_type
// are absent: node reads them first, since the kind decides the defaults
// and which keys are allowed.
var nodeKeyReaders = map[string]func(p *reader, nd *Node, key string, v *yaml.Node){
	"description": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Description = p.str(v, nd.Name, key)
	},
	"next": func(p *reader, nd *Node, _ string, v *yaml.Node) {
		nd.Next = p.next(v, nd.Name)
	},
	"on_error": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.OnError = p.str(v, nd.Name, key)
	},
	"timeout": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Timeout = p.duration(v, nd.Name, key)
	},
	"retry": func(p *reader, nd *Node, _ string, v *yaml.Node) {
		nd.Retry = p.retry(v, nd.Name)
	},
	"env_requires": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.EnvRequires = p.strList(v, nd.Name, key)
	},
	"action": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Action = p.action(v, nd.Name, key)
	},
	"assign": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Assign = p.object(v, nd.Name, key)
		if nd.Assign == nil && !isNull(v) {
			nd.Assign = map[string]any{}
		}
	},
	"over": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Over = p.textOrJSON(v, nd.Name, key)
	},
	"threads": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Threads = p.textOrJSON(v, nd.Name, key)
	},
	"as": func(p *reader, nd *Node, key string, v *yaml.Node) {
		p.strOver(&nd.As, v, nd.Name, key)
	},
	"parallel": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Parallel = p.boolean(v, nd.Name, key)
	},
	"max_concurrency": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.MaxConcurrency = p.bound(v, nd.Name, key)
	},
	"max_items": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.MaxItems = p.bound(v, nd.Name, key)
	},
	"min_success": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.MinSuccess = p.bound(v, nd.Name, key)
	},
	"on_item_error": func(p *reader, nd *Node, key string, v *yaml.Node) {
		p.strOver(&nd.OnItemError, v, nd.Name, key)
	},
	"collect": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Collect = p.str(v, nd.Name, key)
	},
	"output": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Output = p.value(v, nd.Name, key)
	},
	"prompt": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Prompt = p.str(v, nd.Name, key)
	},
	"show": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Show = p.value(v, nd.Name, key)
	},
	"on_timeout": func(p *reader, nd *Node, key string, v *yaml.Node) {
		p.strOver(&nd.OnTimeout, v, nd.Name, key)
	},
	"mode": func(p *reader, nd *Node, key string, v *yaml.Node) {
		p.strOver(&nd.Mode, v, nd.Name, key)
	},
	"on_child_error": func(p *reader, nd *Node, key string, v *yaml.Node) {
		p.strOver(&nd.OnChildError, v, nd.Name, key)
	},
	"for": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.For = p.str(v, nd.Name, key)
	},
	"until": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Until = p.str(v, nd.Name, key)
	},
	"name": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.Message = p.str(v, nd.Name, key)
	},
	"schema": func(p *reader, nd *Node, key string, v *yaml.Node) {
		nd.SchemaValue = p.value(v, nd.Name, key)
		if nd.SchemaValue == nil {
			return
		}
		s, err := ParseSchema(nd.SchemaValue)
		if err != nil {
			p.errorf(nd.Name, key, v, "%v", err)
			return
		}
		nd.MessageSchema = s
	},
}

// strOver reads text into *dst, keeping the default already there when
// the text is empty or null.
func (p *reader) strOver(dst *string, n *yaml.Node, node, key string) {
	if s := p.str(n, node, key); s != "" {
		*dst = s
	}
}

// bound reads a positive limit (max_concurrency, max_items), where 0
// means unset. A 0 written in the file is -1, so that validation reports
// it as out of range rather than taking it for unset.
func (p *reader) bound(n *yaml.Node, node, key string) int {
	v := p.integer(n, node, key)
	if v == 0 && !isNull(n) {
		return -1
	}
	return v
}

// textOrJSON reads a field that holds an expression: text as it is, a
// literal list or mapping as its JSON text (ForeachItems reads a JSON
// array string as a list).
func (p *reader) textOrJSON(n *yaml.Node, node, key string) string {
	if isNull(n) {
		return ""
	}
	if resolve(n).Kind == yaml.ScalarNode {
		return p.str(n, node, key)
	}
	b, err := compactJSON(p.value(n, node, key))
	if err != nil {
		p.errorf(node, key, n, "%v", err)
		return ""
	}
	return string(b)
}

// next reads a node's next: one node name (a default edge) or a list of
// edges.
func (p *reader) next(n *yaml.Node, node string) []Edge {
	if isNull(n) {
		return nil
	}
	n = resolve(n)
	switch n.Kind {
	case yaml.ScalarNode:
		to := p.str(n, node, "next")
		if to == "" {
			p.errorf(node, "next", n, "empty node name")
		}
		return []Edge{{To: to}}
	case yaml.SequenceNode:
	default:
		p.errorf(node, "next", n, "must be a node name or a list of {when, to}, not %s", yamlKind(n))
		return nil
	}
	edges := make([]Edge, 0, len(n.Content))
	for i, c := range n.Content {
		if e, ok := p.edge(c, node, fmt.Sprintf("next[%d]", i)); ok {
			edges = append(edges, e)
		}
	}
	return edges
}

// edge reads one entry of a list of edges: a bare node name is a default
// edge, a mapping is {when, to}. It reports false for an entry that is
// no edge at all (recorded as an error); an edge without to is kept, so
// that the positions of the others hold.
func (p *reader) edge(c *yaml.Node, node, key string) (Edge, bool) {
	if resolve(c) != nil && resolve(c).Kind == yaml.ScalarNode && !isNull(c) {
		return Edge{To: p.str(c, node, key)}, true
	}
	pairs, ok := p.mapping(c, node, key)
	if !ok {
		if isNull(c) {
			p.errorf(node, key, c, "empty edge")
		}
		return Edge{}, false
	}
	var e Edge
	hasTo := false
	for _, f := range pairs {
		switch f.key {
		case "when":
			e.When = p.condition(f.v, node, key+".when", 0)
		case "to":
			hasTo = true
			e.To = p.str(f.v, node, key+".to")
		default:
			p.errorf(node, key+"."+f.key, f.k, "%s", unknownKey(f.key, edgeKeys))
		}
	}
	if !hasTo || e.To == "" {
		p.errorf(node, key+".to", c, "missing: an edge needs the node it goes to")
	}
	return e, true
}

// condition reads a hooks.Condition, normalizing the reference's writing:
// a leaf without op means eq, and a path may index lists as files[0]. An
// empty condition is nil (the reference treated `when: {}` as no
// condition, which makes the edge a default edge).
func (p *reader) condition(n *yaml.Node, node, key string, depth int) *hooks.Condition {
	if isNull(n) {
		return nil
	}
	if depth > maxDepth {
		p.errorf(node, key, n, "nested too deeply")
		return nil
	}
	if !p.spend(node, key, n) {
		return nil
	}
	pairs, ok := p.mapping(n, node, key)
	if !ok {
		return nil
	}
	c := &hooks.Condition{}
	for _, e := range pairs {
		p.conditionKey(c, e, node, key+"."+e.key, depth)
	}
	if c.Path != "" && c.Op == "" {
		c.Op = hooks.OpEq
	}
	if c.Path == "" && c.Op == "" && c.Any == nil && c.All == nil && c.Not == nil {
		return nil
	}
	return c
}

// conditionKey reads the key e of the condition c (at key k, depth deep)
// into c: a leaf's path, op and value, or the combinators any, all and
// not, whose parts are read one level deeper.
func (p *reader) conditionKey(c *hooks.Condition, e kv, node, k string, depth int) {
	switch e.key {
	case "path":
		path := p.str(e.v, node, k)
		norm, err := normalizePath(path)
		if err != nil {
			p.errorf(node, k, e.v, "%v", err)
		}
		c.Path = norm
	case "op":
		c.Op = p.str(e.v, node, k)
	case "value":
		c.Value = p.value(e.v, node, k)
	case "any":
		c.Any = p.conditionList(e.v, node, k, depth+1)
	case "all":
		c.All = p.conditionList(e.v, node, k, depth+1)
	case "not":
		c.Not = p.condition(e.v, node, k, depth+1)
		if c.Not == nil {
			p.errorf(node, k, e.v, "must be a condition")
		}
	default:
		p.errorf(node, k, e.k, "%s", unknownKey(e.key, condKeys))
	}
}

// conditionList reads the parts of any or all (at key k), each depth
// deep. An empty part stays in the list as an empty condition, so that
// the parts keep their positions.
func (p *reader) conditionList(v *yaml.Node, node, k string, depth int) []*hooks.Condition {
	if isNull(v) {
		return nil
	}
	v = resolve(v)
	if v.Kind != yaml.SequenceNode {
		p.errorf(node, k, v, "must be a list of conditions")
		return nil
	}
	var out []*hooks.Condition
	for i, s := range v.Content {
		if sc := p.condition(s, node, fmt.Sprintf("%s[%d]", k, i), depth); sc != nil {
			out = append(out, sc)
		} else {
			out = append(out, &hooks.Condition{})
		}
	}
	return out
}

func (p *reader) retry(n *yaml.Node, node string) *Retry {
	pairs, ok := p.mapping(n, node, "retry")
	if !ok {
		return nil
	}
	r := &Retry{Backoff: DefaultBackoff}
	hasAttempts := false
	for _, e := range pairs {
		k := "retry." + e.key
		switch e.key {
		case "attempts":
			hasAttempts = true
			r.Attempts = p.integer(e.v, node, k)
		case "backoff":
			r.Backoff = p.duration(e.v, node, k)
		case "max_backoff":
			r.MaxBackoff = p.duration(e.v, node, k)
		default:
			p.errorf(node, k, e.k, "%s", unknownKey(e.key, retryKeys))
		}
	}
	if !hasAttempts {
		p.errorf(node, "retry.attempts", n, "missing (1..%d, every try counted)", MaxRetryAttempts)
		r.Attempts = 1
	}
	return r
}

func (p *reader) hooks(g *Graph, n *yaml.Node) {
	if isNull(n) {
		return
	}
	n = resolve(n)
	if n.Kind != yaml.SequenceNode {
		p.errorf("", "config.hooks", n, "must be a list of hooks")
		return
	}
	for i, c := range n.Content {
		key := fmt.Sprintf("config.hooks[%d]", i)
		pairs, ok := p.mapping(c, "", key)
		if !ok {
			continue
		}
		h := Hook{ID: fmt.Sprintf("hook_%d", i+1)}
		for _, e := range pairs {
			k := key + "." + e.key
			switch e.key {
			case "id":
				if s := p.str(e.v, "", k); s != "" {
					h.ID = s
				}
			case "event":
				h.Event = p.str(e.v, "", k)
			case "condition":
				h.Condition = p.condition(e.v, "", k, 0)
			case "action":
				p.hookAction(&h, e.v, k)
			case "description":
				p.str(e.v, "", k)
			default:
				p.errorf("", k, e.k, "%s", unknownKey(e.key, hookKeys))
			}
		}
		g.Hooks = append(g.Hooks, h)
	}
}

// hookAction reads a hook's action: the forms of 3.3, or the hook
// primaries load and search (kept as a hooks.Action for the dispatcher).
func (p *reader) hookAction(h *Hook, n *yaml.Node, key string) {
	pairs, ok := p.mapping(n, "", key)
	if !ok {
		p.errorf("", key, n, "missing")
		return
	}
	for _, e := range pairs {
		if e.key != "primary" {
			continue
		}
		switch prim := p.str(e.v, "", key+".primary"); prim {
		case hooks.PrimaryLoad, hooks.PrimarySearch:
			h.Item = p.hookItem(prim, pairs, n, key)
			return
		case hooks.PrimaryRetry, hooks.PrimaryFail, hooks.PrimaryContinue:
			p.errorf("", key+".primary", e.v, "`%s` is not available to graph hooks: they observe and never change the route (retries are the node's retry block)", prim)
			return
		}
	}
	if a := p.action(n, "", key); a != nil {
		h.Action = *a
	}
}

// hookItemKeys are the keys of a hook's load or search.
var hookItemKeys = []string{"primary", "item_type", "item_id", "params"}

// hookItem reads a hook's load or search (primary prim) from its pairs.
// The item type may be given as item_type or kind, or as the prefix of
// item_id ("knowledge:notes/x"); one of them is required.
func (p *reader) hookItem(prim string, pairs []kv, n *yaml.Node, key string) *hooks.Action {
	item := &hooks.Action{Primary: prim}
	for _, f := range pairs {
		k := key + "." + f.key
		switch f.key {
		case "primary":
		case "item_type", "kind":
			item.ItemType = p.str(f.v, "", k)
		case "item_id":
			item.ItemID = p.str(f.v, "", k)
		case "params":
			item.Params = p.object(f.v, "", k)
		default:
			p.errorf("", k, f.k, "%s", unknownKey(f.key, hookItemKeys))
		}
	}
	if item.ItemType == "" {
		if t, id, ok := strings.Cut(item.ItemID, ":"); ok && !strings.Contains(t, "/") {
			item.ItemType, item.ItemID = t, id
		}
	}
	if item.ItemType == "" {
		p.errorf("", key+".item_type", n, "missing")
	}
	return item
}
