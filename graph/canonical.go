package graph

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/hooks"
)

// Canonical is the normalized graph as YAML in the canonical form (what
// `graph validate --normalize` prints): reference actions written as
// tool/directive/graph, node_type as type, config_schema as inputs,
// config.max_steps under limits, defaults written out (type, as,
// on_item_error, mode, ...), durations as Go durations, keys in a fixed
// order and maps sorted. Ignored reference keys are left out. Parsing the
// canonical form gives the same canonical form again.
func (g *Graph) Canonical() ([]byte, error) {
	c := &canon{}
	root := c.graph(g)
	if c.err != nil {
		return nil, c.err
	}
	quoteMergeKeys(root)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return nil, fmt.Errorf("encode graph %s: %w", g.Name, err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode graph %s: %w", g.Name, err)
	}
	return buf.Bytes(), nil
}

// Digest is the graph digest: the hex SHA-256 of Canonical(). A graph
// that cannot be encoded (not one Parse returns) digests to "".
func (g *Graph) Digest() string {
	b, err := g.Canonical()
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// quoteMergeKeys quotes every "<<": a plain << is YAML's merge key, and a
// graph's "<<" is text.
func quoteMergeKeys(n *yaml.Node) {
	if n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && n.Value == "<<" {
		n.Tag, n.Style = "!!str", yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		quoteMergeKeys(c)
	}
}

// canon builds yaml.Nodes, keeping the first encoding error.
type canon struct{ err error }

// mapping builds a mapping from alternating keys and values, leaving out
// nil values.
func (c *canon) mapping(kvs ...any) *yaml.Node {
	m := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for i := 0; i+1 < len(kvs); i += 2 {
		v, ok := kvs[i+1].(*yaml.Node)
		if !ok || v == nil {
			continue
		}
		m.Content = append(m.Content, str(kvs[i].(string)), v)
	}
	return m
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}

// strIf is str(s), nil for "".
func strIf(s string) *yaml.Node {
	if s == "" {
		return nil
	}
	return str(s)
}

func integer(i int) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!int", Value: strconv.Itoa(i)}
}

func intIf(i int) *yaml.Node {
	if i == 0 {
		return nil
	}
	return integer(i)
}

func boolIf(b bool) *yaml.Node {
	if !b {
		return nil
	}
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"}
}

func strs(l []string) *yaml.Node {
	if len(l) == 0 {
		return nil
	}
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, s := range l {
		n.Content = append(n.Content, str(s))
	}
	return n
}

// value encodes a JSON-like value (maps sorted); nil for nil.
func (c *canon) value(v any) *yaml.Node {
	if v == nil {
		return nil
	}
	n := &yaml.Node{}
	if err := n.Encode(v); err != nil {
		if c.err == nil {
			c.err = err
		}
		return nil
	}
	return n
}

// object encodes a map, nil when empty.
func (c *canon) object(m map[string]any) *yaml.Node {
	if len(m) == 0 {
		return nil
	}
	return c.value(m)
}

func durIf(d time.Duration) *yaml.Node {
	if d <= 0 {
		return nil
	}
	return str(formatDuration(d))
}

func (c *canon) graph(g *Graph) *yaml.Node {
	var meta []any
	for _, k := range []string{"tool_type", "executor_id", "category"} {
		if v, ok := g.Meta[k]; ok {
			meta = append(meta, k, str(v))
		}
	}
	kvs := []any{
		"version", str(g.Version),
		"description", str(g.Description),
		"permissions", c.permissions(g.Permissions),
		"limits", c.limits(g.Limits),
		"inputs", c.schema(g.Inputs),
		"env_requires", strs(g.EnvRequires),
	}
	kvs = append(kvs, meta...)
	kvs = append(kvs, "config", c.config(g))
	return c.mapping(kvs...)
}

func (c *canon) permissions(p []string) *yaml.Node {
	n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, s := range p {
		n.Content = append(n.Content, str(s))
	}
	return n
}

func (c *canon) limits(l Limits) *yaml.Node {
	m := c.mapping(
		"turns", ptrValue(c, l.Turns),
		"tokens", ptrValue(c, l.Tokens),
		"spend", ptrValue(c, l.Spend),
		"depth", ptrValue(c, l.Depth),
		"spawns", ptrValue(c, l.Spawns),
		"duration", ptrValue(c, l.Duration),
		"max_steps", ptrValue(c, l.MaxSteps),
	)
	if len(m.Content) == 0 {
		return nil
	}
	return m
}

func ptrValue[T any](c *canon, p *T) *yaml.Node {
	if p == nil {
		return nil
	}
	return c.value(*p)
}

func (c *canon) schema(s *Schema) *yaml.Node {
	if s == nil {
		return nil
	}
	var props *yaml.Node
	if s.Properties != nil {
		props = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		for _, k := range sortedKeys(s.Properties) {
			props.Content = append(props.Content, str(k), c.schema(s.Properties[k]))
		}
	}
	var def, enum, ap *yaml.Node
	if s.HasDefault {
		def = c.value(s.Default)
		if def == nil {
			def = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		}
	}
	if len(s.Enum) > 0 {
		enum = c.value(s.Enum)
	}
	if s.Type == "object" {
		ap = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: strconv.FormatBool(s.AdditionalProperties)}
	}
	return c.mapping(
		"type", strIf(s.Type),
		"description", strIf(s.Description),
		"default", def,
		"enum", enum,
		"properties", props,
		"required", strs(s.Required),
		"additionalProperties", ap,
		"items", c.schema(s.Items),
	)
}

func (c *canon) config(g *Graph) *yaml.Node {
	var hs *yaml.Node
	if len(g.Hooks) > 0 {
		hs = &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, h := range g.Hooks {
			hs.Content = append(hs.Content, c.hook(h))
		}
	}
	nodes := &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	for _, name := range g.order() {
		nodes.Content = append(nodes.Content, str(name), c.node(g.Nodes[name]))
	}
	onError := g.OnError
	if onError == "" {
		onError = OnErrorFail
	}
	return c.mapping(
		"start", str(g.Start),
		"on_error", str(onError),
		"max_concurrency", integer(g.MaxConcurrency),
		"state", c.object(g.State),
		"hooks", hs,
		"nodes", nodes,
	)
}

func (c *canon) hook(h Hook) *yaml.Node {
	var action *yaml.Node
	if h.Item != nil {
		action = c.mapping(
			"primary", str(h.Item.Primary),
			"item_type", strIf(h.Item.ItemType),
			"item_id", strIf(h.Item.ItemID),
			"params", c.object(h.Item.Params),
		)
	} else {
		action = c.action(&h.Action)
	}
	return c.mapping(
		"id", str(h.ID),
		"event", str(h.Event),
		"condition", c.condition(h.Condition),
		"action", action,
	)
}

func (c *canon) action(a *Action) *yaml.Node {
	if a == nil || a.Kind() == "" {
		return nil
	}
	switch a.Kind() {
	case "tool":
		return c.mapping(
			"tool", str(a.Tool),
			"params", c.object(a.Params),
			"timeout", durIf(a.Timeout),
		)
	case "directive":
		return c.mapping(
			"directive", str(a.Directive),
			"inputs", c.object(a.Inputs),
			"async", boolIf(a.Async),
			"limits", c.object(a.Limits),
			"model", strIf(a.Model),
			"reserve", boolIf(a.Reserve),
		)
	}
	return c.mapping(
		"graph", str(a.Graph),
		"inputs", c.object(a.Inputs),
		"async", boolIf(a.Async),
		"limits", c.object(a.Limits),
		"reserve", boolIf(a.Reserve),
	)
}

func (c *canon) condition(cd *hooks.Condition) *yaml.Node {
	if cd == nil {
		return nil
	}
	list := func(l []*hooks.Condition) *yaml.Node {
		if len(l) == 0 {
			return nil
		}
		n := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
		for _, s := range l {
			e := c.condition(s)
			if e == nil {
				e = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
			}
			n.Content = append(n.Content, e)
		}
		return n
	}
	m := c.mapping(
		"path", strIf(cd.Path),
		"op", strIf(cd.Op),
		"value", c.value(cd.Value),
		"any", list(cd.Any),
		"all", list(cd.All),
		"not", c.condition(cd.Not),
	)
	if len(m.Content) == 0 {
		return nil
	}
	return m
}

func (c *canon) next(n *Node) *yaml.Node {
	switch {
	case len(n.Next) == 0:
		return nil
	case len(n.Next) == 1 && n.Next[0].When == nil:
		return str(n.Next[0].To)
	}
	l := &yaml.Node{Kind: yaml.SequenceNode, Tag: "!!seq"}
	for _, e := range n.Next {
		l.Content = append(l.Content, c.mapping("when", c.condition(e.When), "to", str(e.To)))
	}
	return l
}

func (c *canon) node(n *Node) *yaml.Node {
	kvs := []any{
		"type", str(n.Kind),
		"description", strIf(n.Description),
	}
	switch n.Kind {
	case KindAction:
		kvs = append(kvs, "action", c.action(n.Action))
	case KindForeach:
		kvs = append(kvs,
			"over", str(n.Over),
			"as", str(n.As),
			"parallel", boolIf(n.Parallel),
			"max_concurrency", intIf(n.MaxConcurrency),
			"max_items", intIf(n.MaxItems),
			"on_item_error", str(n.OnItemError),
			"min_success", intIf(n.MinSuccess),
			"action", c.action(n.Action),
			"collect", strIf(n.Collect),
		)
	case KindReturn:
		kvs = append(kvs, "output", c.value(n.Output))
	case KindApproval:
		kvs = append(kvs,
			"prompt", str(n.Prompt),
			"show", c.value(n.Show),
			"on_timeout", str(n.OnTimeout),
		)
	case KindWait:
		kvs = append(kvs,
			"threads", str(n.Threads),
			"mode", str(n.Mode),
			"on_child_error", str(n.OnChildError),
			"collect", strIf(n.Collect),
		)
	case KindSleep:
		kvs = append(kvs, "for", strIf(n.For), "until", strIf(n.Until))
	case KindWaitMessage:
		kvs = append(kvs, "name", str(n.Message), "schema", c.value(n.SchemaValue), "on_timeout", strIf(n.OnTimeout))
	}
	var retry *yaml.Node
	if n.Retry != nil {
		retry = c.mapping(
			"attempts", integer(n.Retry.Attempts),
			"backoff", durIf(n.Retry.Backoff),
			"max_backoff", durIf(n.Retry.MaxBackoff),
		)
	}
	kvs = append(kvs,
		"assign", c.object(n.Assign),
		"timeout", durIf(n.Timeout),
		"retry", retry,
		"env_requires", strs(n.EnvRequires),
		"on_error", strIf(n.OnError),
		"next", c.next(n),
	)
	return c.mapping(kvs...)
}
