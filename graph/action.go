package graph

import (
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/spool-run/spool/thread"
)

var (
	actionIDKeys        = []string{"tool", "directive", "graph"}
	toolActionKeys      = []string{"tool", "params", "timeout"}
	directiveActionKeys = []string{"directive", "inputs", "async", "limits", "model", "reserve"}
	graphActionKeys     = []string{"graph", "inputs", "async", "limits", "reserve"}
	refActionKeys       = []string{"primary", "item_id", "kind", "item_type", "params"}
	// threadDirectiveParams are the reference thread_directive tool's
	// parameters that become a directive action.
	threadDirectiveParams = []string{"directive_id", "directive_name", "inputs", "limit_overrides", "async", "model", "reserve"}
)

// action reads an action in the canonical form or the reference's form
// (3.3) and normalizes it. nil when there is none or it is unusable.
func (p *reader) action(n *yaml.Node, node, key string) *Action {
	pairs, ok := p.mapping(n, node, key)
	if !ok {
		if isNull(n) {
			p.errorf(node, key, n, "empty action")
		}
		return nil
	}
	var ref, canon []string
	for _, e := range pairs {
		if slices.Contains(refActionKeys[:4], e.key) {
			ref = append(ref, e.key)
		}
		if slices.Contains(actionIDKeys, e.key) {
			canon = append(canon, e.key)
		}
	}
	switch {
	case len(ref) > 0 && len(canon) > 0:
		p.errorf(node, key, n, "mixes the reference form (%s) with the canonical form (%s)", strings.Join(ref, ", "), strings.Join(canon, ", "))
		return nil
	case len(ref) > 0:
		return p.refAction(pairs, n, node, key)
	case len(canon) == 0:
		p.errorf(node, key, n, "needs one of tool, directive or graph")
		return nil
	case len(canon) > 1:
		p.errorf(node, key, n, "names more than one of tool, directive and graph (%s)", strings.Join(canon, ", "))
		return nil
	}
	a := &Action{}
	allowed := toolActionKeys
	switch canon[0] {
	case "directive":
		allowed = directiveActionKeys
	case "graph":
		allowed = graphActionKeys
	}
	for _, e := range pairs {
		k := key + "." + e.key
		if !slices.Contains(allowed, e.key) {
			p.errorf(node, k, e.k, "%s", actionKeyMessage(canon[0], e.key))
			continue
		}
		switch e.key {
		case "tool":
			a.Tool = p.id(e.v, node, k)
		case "directive":
			a.Directive = p.id(e.v, node, k)
		case "graph":
			a.Graph = p.id(e.v, node, k)
		case "params":
			a.Params = p.object(e.v, node, k)
		case "inputs":
			a.Inputs = p.object(e.v, node, k)
		case "async":
			a.Async = p.boolean(e.v, node, k)
		case "limits":
			a.Limits = p.object(e.v, node, k)
		case "model":
			a.Model = p.str(e.v, node, k)
		case "reserve":
			a.Reserve = p.boolean(e.v, node, k)
		case "timeout":
			a.Timeout = p.duration(e.v, node, k)
		}
	}
	if a.Kind() == "" {
		return nil
	}
	return a
}

// actionKeyMessage explains a key that a kind of action does not take.
func actionKeyMessage(kind, key string) string {
	switch {
	case key == "params" && kind != "tool":
		return kind + " actions take `inputs`, not `params`"
	case key == "inputs" && kind == "tool":
		return "tool actions take `params`, not `inputs`"
	case key == "timeout":
		return "only tool actions take a timeout; use the node's timeout or limits.duration"
	case slices.Contains(directiveActionKeys, key) || slices.Contains(graphActionKeys, key):
		return "not valid on a " + kind + " action"
	}
	known := toolActionKeys
	switch kind {
	case "directive":
		known = directiveActionKeys
	case "graph":
		known = graphActionKeys
	}
	return unknownKey(key, known)
}

// id reads an action id.
func (p *reader) id(n *yaml.Node, node, key string) string {
	s := strings.TrimSpace(p.str(n, node, key))
	if s == "" {
		p.errorf(node, key, n, "empty id")
	}
	return s
}

// refAction normalizes the reference's {primary, item_id, kind|item_type,
// params}.
func (p *reader) refAction(pairs []kv, n *yaml.Node, node, key string) *Action {
	primary, itemID, declared := "execute", "", ""
	var params map[string]any
	var idNode, paramsNode *yaml.Node
	for _, e := range pairs {
		k := key + "." + e.key
		switch e.key {
		case "primary":
			primary = p.str(e.v, node, k)
		case "item_id":
			itemID, idNode = strings.TrimSpace(p.str(e.v, node, k)), e.v
		case "kind", "item_type":
			if d := p.str(e.v, node, k); declared != "" && d != declared {
				p.errorf(node, k, e.v, "`kind` and `item_type` disagree (%s, %s)", declared, d)
			} else {
				declared = d
			}
		case "params":
			params, paramsNode = p.object(e.v, node, k), e.v
		default:
			msg := unknownKey(e.key, refActionKeys)
			if slices.Contains(actionIDKeys, e.key) || slices.Contains(directiveActionKeys, e.key) {
				msg = "`" + e.key + "` belongs to the canonical form; the reference form passes everything in params"
			}
			p.errorf(node, k, e.k, "%s", msg)
		}
	}
	if primary != "execute" {
		p.errorf(node, key+".primary", n, "`%s` is not supported in v1 (only execute)", primary)
		return nil
	}
	if itemID == "" {
		p.errorf(node, key+".item_id", n, "missing")
		return nil
	}
	kind, id := declared, itemID
	if t, rest, ok := strings.Cut(itemID, ":"); ok && !strings.ContainsAny(t, "/${") {
		if !slices.Contains(actionIDKeys, t) {
			p.errorf(node, key+".item_id", idNode, "a %s item cannot be executed by a graph (tool, directive or graph)", t)
			return nil
		}
		if declared != "" && declared != t {
			p.errorf(node, key+".item_id", idNode, "the prefix %q disagrees with kind %q", t, declared)
		}
		kind, id = t, strings.TrimSpace(rest)
	}
	switch {
	case kind == "":
		p.errorf(node, key+".item_id", idNode, "%q has no kind: write tool:%s (or set kind: tool)", itemID, itemID)
		return nil
	case !slices.Contains(actionIDKeys, kind):
		p.errorf(node, key+".kind", n, "unknown kind %q (tool, directive or graph)", kind)
		return nil
	case id == "":
		p.errorf(node, key+".item_id", idNode, "empty id")
		return nil
	}
	switch {
	case kind == "tool" && strings.ReplaceAll(id, ".", "/") == ThreadDirectiveTool:
		return p.threadDirective(params, paramsNode, node, key+".params")
	case kind == "tool":
		return &Action{Tool: id, Params: params}
	case kind == "directive":
		return &Action{Directive: id, Inputs: params}
	}
	return &Action{Graph: id, Inputs: params}
}

// threadDirective turns the reference's thread_directive tool call into a
// directive action.
func (p *reader) threadDirective(params map[string]any, n *yaml.Node, node, key string) *Action {
	a := &Action{}
	for _, k := range sortedKeys(params) {
		v := params[k]
		sub := key + "." + k
		switch k {
		case "directive_id", "directive_name":
			s, ok := v.(string)
			if !ok || strings.TrimSpace(s) == "" {
				p.errorf(node, sub, n, "must be a directive name")
				continue
			}
			if a.Directive != "" && a.Directive != strings.TrimSpace(s) {
				p.errorf(node, sub, n, "directive_id and directive_name disagree")
			}
			a.Directive = strings.TrimSpace(s)
		case "inputs":
			if v == nil {
				continue
			}
			m, ok := v.(map[string]any)
			if !ok {
				p.errorf(node, sub, n, "must be a mapping")
			}
			a.Inputs = m
		case "limit_overrides":
			if v == nil {
				continue
			}
			m, ok := v.(map[string]any)
			if !ok {
				p.errorf(node, sub, n, "must be a mapping")
			}
			a.Limits = m
		case "async", "reserve":
			b, ok := boolValue(v)
			if !ok {
				p.errorf(node, sub, n, "must be true or false")
			}
			if k == "async" {
				a.Async = b
			} else {
				a.Reserve = b
			}
		case "model":
			s, ok := v.(string)
			if !ok && v != nil {
				p.errorf(node, sub, n, "must be text")
			}
			a.Model = s
		default:
			p.errorf(node, sub, n, "%s", unknownKey(k, threadDirectiveParams))
		}
	}
	if a.Directive == "" {
		p.errorf(node, key+".directive_id", n, "missing: thread_directive needs directive_id or directive_name")
		return nil
	}
	return a
}

func boolValue(v any) (bool, bool) {
	if v == nil {
		return false, true
	}
	return thread.Bool(v)
}

// Capability is the capability the action needs (section 16): tool X
// needs rye.execute.tool.<X dotted>, directive X
// rye.execute.directive.<X dotted>, graph X rye.execute.graph.<X dotted>.
// "" for an empty action.
func (a *Action) Capability() string {
	switch a.Kind() {
	case "tool":
		return thread.ToolCapability(a.Tool)
	case "directive":
		return thread.Capability(thread.PrimaryExecute, "directive", a.Directive)
	case "graph":
		return thread.Capability(thread.PrimaryExecute, "graph", a.Graph)
	}
	return ""
}

// Permitted reports whether caps allow the action. Besides the action's
// Capability, the thread_directive tool's capability
// (rye.execute.tool.rye.agent.threads.thread_directive) grants every
// directive, and a reference tool action that runs a graph (AsGraph) is
// also allowed by the capability of the tool it was written as.
func Permitted(caps []string, a *Action) bool {
	need := a.Capability()
	if need == "" {
		return false
	}
	if thread.Match(caps, need) {
		return true
	}
	if a.Directive != "" && thread.Match(caps, thread.ToolCapability(ThreadDirectiveTool)) {
		return true
	}
	return a.viaTool != "" && thread.Match(caps, thread.ToolCapability(a.viaTool))
}

// MaybeGraph returns the tool id of a tool action, which may name a graph
// kept among the tools (a reference graph's `item_id: tool:graphs/X`): the
// runtime checks its bundle for a graph of that name and runs it with
// AsGraph. "" for other actions and for ids that hold ${...}.
func (a *Action) MaybeGraph() string {
	if a == nil || a.Tool == "" || hasRefs(a.Tool) {
		return ""
	}
	return a.Tool
}

// AsGraph is the graph action that a tool action naming a graph runs as:
// graph a.Tool with a.Params as its inputs, except the parameters the
// reference gave about the run itself: limits become Limits, async Async,
// and capabilities, depth and parent_thread_id are dropped (a graph run's
// capabilities are always its permissions capped by its starter's).
// Permitted accepts it under the tool's capability too.
func (a *Action) AsGraph() *Action {
	out := &Action{Graph: a.Tool, Timeout: a.Timeout, viaTool: a.Tool}
	for k, v := range a.Params {
		switch k {
		case "limits":
			out.Limits, _ = v.(map[string]any)
		case "async":
			out.Async, _ = boolValue(v)
		case "capabilities", "depth", "parent_thread_id":
		default:
			if out.Inputs == nil {
				out.Inputs = map[string]any{}
			}
			out.Inputs[k] = v
		}
	}
	return out
}
