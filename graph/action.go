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
	ref, canon := actionForms(pairs)
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
	return p.canonicalAction(pairs, canon[0], node, key)
}

// actionForms sorts out which form an action's keys are written in: the
// keys that only the reference form has (primary, item_id, kind,
// item_type) and the canonical form's id keys (tool, directive, graph).
// params belongs to both and counts for neither.
func actionForms(pairs []kv) (ref, canon []string) {
	for _, e := range pairs {
		if slices.Contains(refActionKeys[:4], e.key) {
			ref = append(ref, e.key)
		}
		if slices.Contains(actionIDKeys, e.key) {
			canon = append(canon, e.key)
		}
	}
	return ref, canon
}

// actionKeys are the keys an action of kind (tool, directive or graph)
// takes in the canonical form.
func actionKeys(kind string) []string {
	switch kind {
	case "directive":
		return directiveActionKeys
	case "graph":
		return graphActionKeys
	}
	return toolActionKeys
}

// canonicalAction reads an action in the canonical form, whose id key
// says its kind; keys that kind does not take are errors.
func (p *reader) canonicalAction(pairs []kv, kind, node, key string) *Action {
	a := &Action{}
	allowed := actionKeys(kind)
	for _, e := range pairs {
		k := key + "." + e.key
		if !slices.Contains(allowed, e.key) {
			p.errorf(node, k, e.k, "%s", actionKeyMessage(kind, e.key))
			continue
		}
		actionFieldReaders[e.key](p, a, e.v, node, k)
	}
	if a.Kind() == "" {
		return nil
	}
	return a
}

// actionFieldReaders read each key of a canonical action into it.
var actionFieldReaders = map[string]func(p *reader, a *Action, v *yaml.Node, node, key string){
	"tool":      func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Tool = p.id(v, node, key) },
	"directive": func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Directive = p.id(v, node, key) },
	"graph":     func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Graph = p.id(v, node, key) },
	"params":    func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Params = p.object(v, node, key) },
	"inputs":    func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Inputs = p.object(v, node, key) },
	"async":     func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Async = p.boolean(v, node, key) },
	"limits":    func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Limits = p.object(v, node, key) },
	"model":     func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Model = p.str(v, node, key) },
	"reserve":   func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Reserve = p.boolean(v, node, key) },
	"timeout":   func(p *reader, a *Action, v *yaml.Node, node, key string) { a.Timeout = p.duration(v, node, key) },
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
	return unknownKey(key, actionKeys(kind))
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
	f := p.refFields(pairs, node, key)
	if f.primary != "execute" {
		p.errorf(node, key+".primary", n, "`%s` is not supported in v1 (only execute)", f.primary)
		return nil
	}
	if f.itemID == "" {
		p.errorf(node, key+".item_id", n, "missing")
		return nil
	}
	kind, id, ok := p.refItem(f, n, node, key)
	if !ok {
		return nil
	}
	switch {
	case kind == "tool" && strings.ReplaceAll(id, ".", "/") == ThreadDirectiveTool:
		return p.threadDirective(f.params, f.paramsNode, node, key+".params")
	case kind == "tool":
		return &Action{Tool: id, Params: f.params}
	case kind == "directive":
		return &Action{Directive: id, Inputs: f.params}
	}
	return &Action{Graph: id, Inputs: f.params}
}

// refActionFields are the keys of a reference action as written, with
// the nodes that errors about item_id and params point at.
type refActionFields struct {
	primary, itemID, declared string // declared: kind or item_type
	params                    map[string]any
	idNode, paramsNode        *yaml.Node
}

// refFields reads the keys of a reference action. kind and item_type are
// the same key and must agree; a canonical key is an error that says the
// reference form passes everything in params.
func (p *reader) refFields(pairs []kv, node, key string) refActionFields {
	f := refActionFields{primary: "execute"}
	for _, e := range pairs {
		k := key + "." + e.key
		switch e.key {
		case "primary":
			f.primary = p.str(e.v, node, k)
		case "item_id":
			f.itemID, f.idNode = strings.TrimSpace(p.str(e.v, node, k)), e.v
		case "kind", "item_type":
			if d := p.str(e.v, node, k); f.declared != "" && d != f.declared {
				p.errorf(node, k, e.v, "`kind` and `item_type` disagree (%s, %s)", f.declared, d)
			} else {
				f.declared = d
			}
		case "params":
			f.params, f.paramsNode = p.object(e.v, node, k), e.v
		default:
			msg := unknownKey(e.key, refActionKeys)
			if slices.Contains(actionIDKeys, e.key) || slices.Contains(directiveActionKeys, e.key) {
				msg = "`" + e.key + "` belongs to the canonical form; the reference form passes everything in params"
			}
			p.errorf(node, k, e.k, "%s", msg)
		}
	}
	return f
}

// refItem works out the kind and id of a reference action's item: a
// prefix of item_id ("tool:x", not a path or an expression) gives the
// kind, which a declared kind must agree with; otherwise the declared
// kind is the kind. It reports false when the item cannot be executed.
func (p *reader) refItem(f refActionFields, n *yaml.Node, node, key string) (kind, id string, ok bool) {
	kind, id = f.declared, f.itemID
	if t, rest, found := strings.Cut(f.itemID, ":"); found && !strings.ContainsAny(t, "/${") {
		if !slices.Contains(actionIDKeys, t) {
			p.errorf(node, key+".item_id", f.idNode, "a %s item cannot be executed by a graph (tool, directive or graph)", t)
			return "", "", false
		}
		if f.declared != "" && f.declared != t {
			p.errorf(node, key+".item_id", f.idNode, "the prefix %q disagrees with kind %q", t, f.declared)
		}
		kind, id = t, strings.TrimSpace(rest)
	}
	switch {
	case kind == "":
		p.errorf(node, key+".item_id", f.idNode, "%q has no kind: write tool:%s (or set kind: tool)", f.itemID, f.itemID)
		return "", "", false
	case !slices.Contains(actionIDKeys, kind):
		p.errorf(node, key+".kind", n, "unknown kind %q (tool, directive or graph)", kind)
		return "", "", false
	case id == "":
		p.errorf(node, key+".item_id", f.idNode, "empty id")
		return "", "", false
	}
	return kind, id, true
}

// threadDirective turns the reference's thread_directive tool call into a
// directive action.
func (p *reader) threadDirective(params map[string]any, n *yaml.Node, node, key string) *Action {
	a := &Action{}
	for _, k := range sortedKeys(params) {
		sub := key + "." + k
		if read := threadDirectiveReaders[k]; read != nil {
			read(p, a, params[k], n, node, sub)
			continue
		}
		p.errorf(node, sub, n, "%s", unknownKey(k, threadDirectiveParams))
	}
	if a.Directive == "" {
		p.errorf(node, key+".directive_id", n, "missing: thread_directive needs directive_id or directive_name")
		return nil
	}
	return a
}

// threadDirectiveReaders read each thread_directive parameter (v, at
// key) into the directive action a. Errors point at n, the params
// mapping, since a parameter's value is already decoded.
var threadDirectiveReaders = map[string]func(p *reader, a *Action, v any, n *yaml.Node, node, key string){
	"directive_id":   (*reader).directiveName,
	"directive_name": (*reader).directiveName,
	"inputs": func(p *reader, a *Action, v any, n *yaml.Node, node, key string) {
		a.Inputs = p.mappingParam(v, n, node, key)
	},
	"limit_overrides": func(p *reader, a *Action, v any, n *yaml.Node, node, key string) {
		a.Limits = p.mappingParam(v, n, node, key)
	},
	"async": func(p *reader, a *Action, v any, n *yaml.Node, node, key string) {
		a.Async = p.boolParam(v, n, node, key)
	},
	"reserve": func(p *reader, a *Action, v any, n *yaml.Node, node, key string) {
		a.Reserve = p.boolParam(v, n, node, key)
	},
	"model": func(p *reader, a *Action, v any, n *yaml.Node, node, key string) {
		s, ok := v.(string)
		if !ok && v != nil {
			p.errorf(node, key, n, "must be text")
		}
		a.Model = s
	},
}

// directiveName reads directive_id or directive_name, which name the
// directive; when both are given they must agree.
func (p *reader) directiveName(a *Action, v any, n *yaml.Node, node, key string) {
	s, ok := v.(string)
	if !ok || strings.TrimSpace(s) == "" {
		p.errorf(node, key, n, "must be a directive name")
		return
	}
	if a.Directive != "" && a.Directive != strings.TrimSpace(s) {
		p.errorf(node, key, n, "directive_id and directive_name disagree")
	}
	a.Directive = strings.TrimSpace(s)
}

// mappingParam reads a parameter that must be a mapping; null is none.
func (p *reader) mappingParam(v any, n *yaml.Node, node, key string) map[string]any {
	if v == nil {
		return nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		p.errorf(node, key, n, "must be a mapping")
	}
	return m
}

// boolParam reads a parameter that must be true or false (or null,
// false); text such as "true" counts, as thread.Bool reads it.
func (p *reader) boolParam(v any, n *yaml.Node, node, key string) bool {
	b, ok := boolValue(v)
	if !ok {
		p.errorf(node, key, n, "must be true or false")
	}
	return b
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
