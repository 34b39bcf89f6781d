package graph

import (
	"fmt"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/thread"
)

// Known keys, in the order the canonical form writes them.
var (
	topKeys    = []string{"version", "description", "permissions", "limits", "inputs", "config_schema", "env_requires", "config", "tool_type", "executor_id", "category", "tool_id"}
	configKeys = []string{"start", "nodes", "max_steps", "on_error", "state", "hooks", "max_concurrency"}
	limitKeys  = append(append([]string{}, thread.LimitNames...), "max_steps")

	commonNodeKeys = []string{"type", "node_type", "description", "next", "on_error", "timeout", "retry", "env_requires"}
	kindNodeKeys   = map[string][]string{
		KindAction:   {"action", "assign"},
		KindForeach:  {"over", "as", "parallel", "max_concurrency", "max_items", "on_item_error", "collect", "action", "assign"},
		KindGate:     {"assign"},
		KindReturn:   {"output"},
		KindApproval: {"prompt", "show", "on_timeout", "assign"},
		KindWait:     {"threads", "mode", "on_child_error", "collect", "assign"},
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

func (p *reader) graph(g *Graph, doc *yaml.Node) {
	if isNull(doc) {
		p.errorf("", "", nil, "the file is empty")
		return
	}
	pairs, ok := p.mapping(doc, "", "")
	if !ok {
		return
	}
	var schema, schemaAlias *yaml.Node
	var configMaxSteps *int
	for _, e := range pairs {
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
			schema = e.v
		case "config_schema":
			schemaAlias = e.v
		case "env_requires":
			g.EnvRequires = p.strList(e.v, "", e.key)
		case "config":
			configMaxSteps = p.config(g, e.v)
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
			p.errorf("", e.key, e.k, "%s", unknownKey(e.key, topKeys))
		}
	}
	if configMaxSteps != nil {
		g.Limits.MaxSteps = configMaxSteps
		g.maxStepsKey = "config.max_steps"
	}
	switch {
	case schema != nil && schemaAlias != nil:
		p.errorf("", "config_schema", schemaAlias, "give the inputs schema once: `inputs` and its alias `config_schema` are both set")
		fallthrough
	case schema != nil:
		g.Inputs = p.schema(schema, "inputs")
	case schemaAlias != nil:
		g.Inputs = p.schema(schemaAlias, "config_schema")
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
			if s, ok := v.(string); ok {
				if d, err := parseDuration(s); err == nil {
					v = d.Seconds()
				}
			}
		}
		if err := g.Limits.SetLimit(e.key, v); err != nil {
			p.errorf("", key, e.v, "%v", err)
		}
	}
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

func (p *reader) node(name string, n *yaml.Node) *Node {
	nd := &Node{Name: name, Kind: KindAction}
	if isNull(n) || resolve(n).Kind != yaml.MappingNode {
		p.errorf(name, "", n, "a node must be a mapping, not %s", yamlKind(n))
		return nd
	}
	pairs, _ := p.mapping(n, name, "")
	var kindKey *kv
	for i, e := range pairs {
		if e.key != "type" && e.key != "node_type" {
			continue
		}
		k := p.str(e.v, name, e.key)
		if kindKey != nil && k != nd.Kind {
			p.errorf(name, e.key, e.k, "`type` and `node_type` disagree (%s, %s)", nd.Kind, k)
		}
		kindKey = &pairs[i]
		nd.Kind = k
	}
	if nd.Kind == "" {
		nd.Kind = KindAction
	}
	valid := slices.Contains(Kinds, nd.Kind)
	if !valid {
		msg := fmt.Sprintf("unknown node kind `%s`", nd.Kind)
		if s := nearest(nd.Kind, Kinds); s != "" {
			msg += fmt.Sprintf(" (did you mean `%s`?)", s)
		}
		p.errorf(name, kindKey.key, kindKey.v, "%s (known: %s)", msg, strings.Join(Kinds, ", "))
	}
	switch nd.Kind {
	case KindForeach:
		nd.As, nd.OnItemError = "item", OnErrorFail
	case KindApproval:
		nd.OnTimeout = "deny"
	case KindWait:
		nd.Mode, nd.OnChildError = "all", OnErrorFail
	}
	for _, e := range pairs {
		if !p.nodeKeyAllowed(nd, valid, e) {
			continue
		}
		p.nodeKey(nd, e)
	}
	return nd
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

func (p *reader) nodeKey(nd *Node, e kv) {
	name, key, v := nd.Name, e.key, e.v
	switch key {
	case "type", "node_type":
	case "description":
		nd.Description = p.str(v, name, key)
	case "next":
		nd.Next = p.next(v, name)
	case "on_error":
		nd.OnError = p.str(v, name, key)
	case "timeout":
		nd.Timeout = p.duration(v, name, key)
	case "retry":
		nd.Retry = p.retry(v, name)
	case "env_requires":
		nd.EnvRequires = p.strList(v, name, key)
	case "action":
		nd.Action = p.action(v, name, key)
	case "assign":
		nd.Assign = p.object(v, name, key)
		if nd.Assign == nil && !isNull(v) {
			nd.Assign = map[string]any{}
		}
	case "over":
		nd.Over = p.textOrJSON(v, name, key)
	case "threads":
		nd.Threads = p.textOrJSON(v, name, key)
	case "as":
		if s := p.str(v, name, key); s != "" {
			nd.As = s
		}
	case "parallel":
		nd.Parallel = p.boolean(v, name, key)
	case "max_concurrency":
		nd.MaxConcurrency = p.integer(v, name, key)
		if nd.MaxConcurrency == 0 && !isNull(v) {
			nd.MaxConcurrency = -1 // written as 0: out of range, not "unset"
		}
	case "max_items":
		nd.MaxItems = p.integer(v, name, key)
		if nd.MaxItems == 0 && !isNull(v) {
			nd.MaxItems = -1
		}
	case "on_item_error":
		if s := p.str(v, name, key); s != "" {
			nd.OnItemError = s
		}
	case "collect":
		nd.Collect = p.str(v, name, key)
	case "output":
		nd.Output = p.value(v, name, key)
	case "prompt":
		nd.Prompt = p.str(v, name, key)
	case "show":
		nd.Show = p.value(v, name, key)
	case "on_timeout":
		if s := p.str(v, name, key); s != "" {
			nd.OnTimeout = s
		}
	case "mode":
		if s := p.str(v, name, key); s != "" {
			nd.Mode = s
		}
	case "on_child_error":
		if s := p.str(v, name, key); s != "" {
			nd.OnChildError = s
		}
	}
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
		key := fmt.Sprintf("next[%d]", i)
		if resolve(c) != nil && resolve(c).Kind == yaml.ScalarNode && !isNull(c) { // a bare name: a default edge
			edges = append(edges, Edge{To: p.str(c, node, key)})
			continue
		}
		pairs, ok := p.mapping(c, node, key)
		if !ok {
			if isNull(c) {
				p.errorf(node, key, c, "empty edge")
			}
			continue
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
		edges = append(edges, e)
	}
	return edges
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
	list := func(v *yaml.Node, k string) []*hooks.Condition {
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
			if sc := p.condition(s, node, fmt.Sprintf("%s[%d]", k, i), depth+1); sc != nil {
				out = append(out, sc)
			} else {
				out = append(out, &hooks.Condition{})
			}
		}
		return out
	}
	for _, e := range pairs {
		k := key + "." + e.key
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
			c.Any = list(e.v, k)
		case "all":
			c.All = list(e.v, k)
		case "not":
			c.Not = p.condition(e.v, node, k, depth+1)
			if c.Not == nil {
				p.errorf(node, k, e.v, "must be a condition")
			}
		default:
			p.errorf(node, k, e.k, "%s", unknownKey(e.key, condKeys))
		}
	}
	if c.Path != "" && c.Op == "" {
		c.Op = hooks.OpEq
	}
	if c.Path == "" && c.Op == "" && c.Any == nil && c.All == nil && c.Not == nil {
		return nil
	}
	return c
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
					p.errorf("", k, f.k, "%s", unknownKey(f.key, []string{"primary", "item_type", "item_id", "params"}))
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
			h.Item = item
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
