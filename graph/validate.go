package graph

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/thread"
)

var (
	nodeNameRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	asNameRe   = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

// Validate checks the graph (section 15): errors make the graph unusable,
// warnings point at likely mistakes. Static permission checks (section
// 16) are warnings. A graph from Parse also carries what Parse found.
func (g *Graph) Validate() Report {
	var r Report
	r.add(g.parsed)
	v := &validator{g: g, r: &r, reads: map[string]string{}, writes: map[string]string{}}
	v.top()
	order := g.order()
	for _, name := range order {
		v.node(g.Nodes[name])
	}
	v.hooks()
	if g.Nodes[g.Start] != nil {
		v.reachability(order)
		v.cycles(order)
	}
	v.returns(order)
	v.stateFlow(order)
	r.sortBy(order)
	if r.Errors == nil {
		r.Errors = []Diagnostic{}
	}
	if r.Warnings == nil {
		r.Warnings = []Diagnostic{}
	}
	return r
}

// order is g.Order restricted to existing nodes, then any node it misses
// (a graph built in code), sorted.
func (g *Graph) order() []string {
	out := make([]string, 0, len(g.Nodes))
	seen := map[string]bool{}
	for _, n := range g.Order {
		if g.Nodes[n] != nil && !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	for _, n := range sortedKeys(g.Nodes) {
		if !seen[n] && g.Nodes[n] != nil {
			out = append(out, n)
		}
	}
	return out
}

type validator struct {
	g *Graph
	r *Report
	// reads and writes map state keys to the first node (in file order)
	// that reads or writes them ("" for the graph level).
	reads, writes map[string]string
	readsAll      bool // some expression reads the whole state
}

func (v *validator) errorf(node, key, format string, a ...any) {
	v.r.errorf(node, key, fmt.Sprintf(format, a...))
}

func (v *validator) warnf(node, key, format string, a ...any) {
	v.r.warnf(node, key, fmt.Sprintf(format, a...))
}

// parsedAt reports whether Parse already reported an error at node/key
// (or under it).
func (v *validator) parsedAt(node, key string) bool {
	for _, d := range v.g.parsed.Errors {
		if d.Node == node && (d.Key == key || strings.HasPrefix(d.Key, key+".") || strings.HasPrefix(d.Key, key+"[")) {
			return true
		}
	}
	return false
}

func (v *validator) unknownNode(name string) string {
	msg := fmt.Sprintf("unknown node `%s`", name)
	if n := nearest(name, v.g.order()); n != "" {
		msg += fmt.Sprintf(" (did you mean `%s`?)", n)
	}
	return msg
}

func (v *validator) top() {
	g := v.g
	if g.Version == "" {
		v.warnf("", "version", "missing: give the graph's own version")
	}
	if g.Description == "" {
		v.warnf("", "description", "missing: one line for listings and the monitor")
	}
	if len(g.Permissions) == 0 && !v.parsedAt("", "permissions") {
		v.errorf("", "permissions", "missing or empty: a graph without permissions may do nothing (fail closed)")
	}
	for _, p := range g.Permissions {
		if c := thread.NormalizeCapability(p); c != "*" && !strings.HasPrefix(c, thread.CapabilityPrefix) {
			v.warnf("", "permissions", "%q grants nothing: capabilities start with %q", p, thread.CapabilityPrefix)
		}
	}
	switch {
	case g.Start == "" && !v.parsedAt("", "config.start"):
		v.errorf("", "config.start", "missing: name the first node")
	case g.Start != "" && g.Nodes[g.Start] == nil && len(g.Nodes) > 0:
		v.errorf("", "config.start", "%s", v.unknownNode(g.Start))
	}
	if len(g.Nodes) == 0 && !v.parsedAt("", "config.nodes") {
		v.errorf("", "config.nodes", "missing: a graph needs nodes")
	}
	switch g.OnError {
	case OnErrorFail, OnErrorContinue:
		if g.Nodes[g.OnError] != nil {
			v.warnf("", "config.on_error", "`%s` is the error mode, not the node of that name", g.OnError)
		}
	case "":
	default:
		if g.Nodes[g.OnError] == nil {
			v.errorf("", "config.on_error", "%s (or fail, continue)", v.unknownNode(g.OnError))
		}
	}
	if g.MaxConcurrency < 1 || g.MaxConcurrency > MaxConcurrencyCap {
		v.errorf("", "config.max_concurrency", "must be 1..%d, not %d", MaxConcurrencyCap, g.MaxConcurrency)
	}
	if ms := g.Limits.MaxSteps; ms != nil {
		key := g.maxStepsKey
		if key == "" {
			key = "limits.max_steps"
		}
		switch {
		case *ms < 1:
			v.errorf("", key, "must be at least 1, not %d", *ms)
		case *ms > MaxStepsCap:
			v.errorf("", key, "%d is above the hard cap %d", *ms, MaxStepsCap)
		}
	}
	for _, k := range sortedKeys(g.State) {
		if reservedStateKey(k) {
			v.errorf("", "config.state."+k, "reserved: `inputs` and keys starting with _ are set by the runtime")
		}
		v.write(k, "")
	}
	for _, e := range g.EnvRequires {
		if strings.TrimSpace(e) == "" || strings.ContainsAny(e, "= \t") {
			v.errorf("", "env_requires", "%q is not an environment variable name", e)
		}
	}
}

func (v *validator) write(key, node string) {
	if _, ok := v.writes[key]; !ok {
		v.writes[key] = node
	}
}

func (v *validator) read(key, node string) {
	if _, ok := v.reads[key]; !ok {
		v.reads[key] = node
	}
}

// where says what an expression can see.
type where int

const (
	whereAction   where = iota // a node's own action: no result; <as> and loop in a foreach
	wherePre                   // over, threads, prompt, show: no result yet
	whereAfter                 // assign and next of a node that has a result
	whereNoResult              // assign of a gate, output of a return: result is missing
	whereHook                  // hook actions: the event's context
)

func (v *validator) node(n *Node) {
	name := n.Name
	if !nodeNameRe.MatchString(name) {
		v.errorf(name, "", "a node name must match [A-Za-z0-9_-]{1,64}")
	}
	if !slices.Contains(Kinds, n.Kind) {
		if !v.parsedAt(name, "type") && !v.parsedAt(name, "node_type") {
			v.errorf(name, "type", "unknown node kind `%s` (known: %s)", n.Kind, strings.Join(Kinds, ", "))
		}
		return
	}
	after := whereAfter
	if n.Kind == KindGate || n.Kind == KindReturn {
		after = whereNoResult
	}
	switch n.Kind {
	case KindAction:
		if n.Action == nil && !v.parsedAt(name, "action") {
			v.errorf(name, "action", "missing: an action node needs an action (or type: gate)")
		}
	case KindForeach:
		v.foreach(n)
	case KindApproval:
		if strings.TrimSpace(n.Prompt) == "" {
			v.errorf(name, "prompt", "missing: an approval node asks a person something")
		}
		v.exprs(name, "prompt", n.Prompt, wherePre, nil)
		v.exprs(name, "show", n.Show, wherePre, nil)
		if n.OnTimeout != "deny" && n.OnTimeout != "approve" {
			v.errorf(name, "on_timeout", "must be deny or approve, not %q", n.OnTimeout)
		}
	case KindWait:
		if strings.TrimSpace(n.Threads) == "" {
			v.errorf(name, "threads", "missing: the list of child ids to wait for")
		}
		v.exprs(name, "threads", n.Threads, wherePre, nil)
		if n.Mode != "all" && n.Mode != "any" {
			v.errorf(name, "mode", "must be all or any, not %q", n.Mode)
		}
		if n.OnChildError != OnErrorFail && n.OnChildError != OnErrorContinue {
			v.errorf(name, "on_child_error", "must be fail or continue, not %q", n.OnChildError)
		}
		v.collect(n)
	case KindReturn:
		if len(n.Next) > 0 {
			v.warnf(name, "next", "a return node ends the run; its next is never followed")
		}
		v.exprs(name, "output", n.Output, whereNoResult, nil)
		v.output(n)
	}
	if n.Kind == KindAction || n.Kind == KindForeach {
		v.action(name, "action", n.Action, n)
	}
	for _, k := range sortedKeys(n.Assign) {
		if reservedStateKey(k) {
			v.errorf(name, "assign."+k, "cannot assign `%s`: inputs and keys starting with _ belong to the runtime", k)
		}
		v.write(k, name)
		v.exprs(name, "assign."+k, n.Assign[k], after, nil)
	}
	v.edges(n, after)
	if n.OnError != "" && n.OnError != name && v.g.Nodes[n.OnError] == nil {
		v.errorf(name, "on_error", "%s", v.unknownNode(n.OnError))
	}
	if n.Retry != nil {
		if n.Retry.Attempts < 1 || n.Retry.Attempts > MaxRetryAttempts {
			v.errorf(name, "retry.attempts", "must be 1..%d (every try counts), not %d", MaxRetryAttempts, n.Retry.Attempts)
		}
		if n.Retry.Backoff < 0 || n.Retry.MaxBackoff < 0 {
			v.errorf(name, "retry", "backoffs must not be negative")
		}
		if n.Retry.MaxBackoff > 0 && n.Retry.MaxBackoff < n.Retry.Backoff {
			v.warnf(name, "retry.max_backoff", "is below backoff (%s < %s), so every delay is %s", formatDuration(n.Retry.MaxBackoff), formatDuration(n.Retry.Backoff), formatDuration(n.Retry.MaxBackoff))
		}
	}
	if n.Timeout < 0 {
		v.errorf(name, "timeout", "must be positive")
	}
}

// output checks that a return's output is an object: a mapping, or one
// whole ${...} (whose value is checked when the run returns).
func (v *validator) output(n *Node) {
	switch o := n.Output.(type) {
	case nil, map[string]any:
		return
	case string:
		if t, err := parseTemplate(o); err != nil || t.whole() != nil {
			return
		}
	}
	v.errorf(n.Name, "output", "must be a mapping (or one ${...} that holds an object): the run's outputs are an object")
}

func (v *validator) foreach(n *Node) {
	name := n.Name
	if strings.TrimSpace(n.Over) == "" {
		v.errorf(name, "over", "missing: a foreach needs the list to iterate over")
	}
	v.exprs(name, "over", n.Over, wherePre, nil)
	if n.Action == nil && !v.parsedAt(name, "action") {
		v.errorf(name, "action", "missing: a foreach needs the action to run per item")
	}
	switch {
	case !asNameRe.MatchString(n.As):
		v.errorf(name, "as", "%q is not a name ([A-Za-z_][A-Za-z0-9_]*)", n.As)
	case slices.Contains(reservedNames, n.As):
		v.errorf(name, "as", "`%s` is a namespace of the scope; choose another name", n.As)
	}
	if n.Collect != "" && n.Collect == n.As {
		v.errorf(name, "collect", "equals as (`%s`): the item variable and the results key must differ", n.As)
	}
	if n.MaxConcurrency != 0 && (n.MaxConcurrency < 1 || n.MaxConcurrency > MaxConcurrencyCap) {
		v.errorf(name, "max_concurrency", "must be 1..%d", MaxConcurrencyCap)
	} else if n.MaxConcurrency != 0 && !n.Parallel {
		v.warnf(name, "max_concurrency", "ignored: items run one at a time unless parallel is true")
	}
	if n.MaxItems < 0 {
		v.errorf(name, "max_items", "must be at least 1")
	}
	if n.OnItemError != OnErrorFail && n.OnItemError != OnErrorContinue {
		v.errorf(name, "on_item_error", "must be fail or continue, not %q", n.OnItemError)
	}
	v.collect(n)
}

func (v *validator) collect(n *Node) {
	if n.Collect == "" {
		return
	}
	if reservedStateKey(n.Collect) {
		v.errorf(n.Name, "collect", "cannot collect into `%s`: inputs and keys starting with _ belong to the runtime", n.Collect)
	}
	if _, ok := n.Assign[n.Collect]; ok {
		v.warnf(n.Name, "collect", "assign also writes `%s`; the assign wins", n.Collect)
	}
	v.write(n.Collect, n.Name)
}

// action checks an action's ids, limits, expressions and permission.
func (v *validator) action(node, key string, a *Action, n *Node) {
	if a == nil {
		return
	}
	if a.Kind() == "" {
		v.errorf(node, key, "needs one of tool, directive or graph")
		return
	}
	var local []string
	w := whereAction
	if node == "" {
		w = whereHook
	} else if n != nil && n.Kind == KindForeach {
		local = []string{n.As, ScopeLoop}
	}
	idKey := key + "." + a.Kind()
	v.exprs(node, idKey, a.ID(), w, local)
	v.exprs(node, key+".params", a.Params, w, local)
	v.exprs(node, key+".inputs", a.Inputs, w, local)
	v.exprs(node, key+".limits", a.Limits, w, local)
	if len(a.Limits) > 0 {
		refs, _ := refsOf(a.Limits)
		if len(refs) == 0 {
			l := make(map[string]any, len(a.Limits))
			for k, x := range a.Limits {
				if k == "max_steps" && a.Graph != "" {
					continue
				}
				l[k] = x
			}
			if _, err := thread.LimitsFromMap(l); err != nil {
				v.errorf(node, key+".limits", "%v", err)
			}
		}
	}
	if a.Timeout < 0 {
		v.errorf(node, key+".timeout", "must be positive")
	}
	if hasRefs(a.ID()) {
		v.warnf(node, idKey, "`%s` is computed at run time, so its permission cannot be checked here", a.ID())
		return
	}
	// A tool action may name a graph kept among the tools (AsGraph).
	permitted := Permitted(v.g.Permissions, a) || a.Tool != "" && Permitted(v.g.Permissions, a.AsGraph())
	if !permitted {
		v.warnf(node, idKey, "%s needs %s, which permissions do not grant (the step would be refused)", a.String(), a.Capability())
	}
}

// exprs checks the ${...} references inside val and records state reads.
func (v *validator) exprs(node, key string, val any, w where, local []string) {
	if val == nil {
		return
	}
	var bad error
	walkStrings(val, func(s string) {
		t, err := parseTemplate(s)
		if err != nil {
			if bad == nil {
				bad = err
			}
			return
		}
		for _, p := range t {
			if p.ref != nil {
				v.expr(node, key, p.ref, w, local)
			}
		}
	})
	if bad != nil {
		v.errorf(node, key, "%v", bad)
	}
}

func (v *validator) expr(node, key string, e *expr, w where, local []string) {
	for _, t := range e.terms {
		if t.isLit {
			continue
		}
		root := t.path[0]
		switch {
		case root == ScopeState:
			if len(t.path) == 1 {
				v.readsAll = true
			} else {
				v.read(t.path[1], node)
			}
		case root == ScopeResult:
			switch w {
			case whereAction:
				v.errorf(node, key, "${%s}: `result` inside the node's own action: the action runs before there is a result", e.src)
			case wherePre:
				v.errorf(node, key, "${%s}: `result` is not set yet here: it is the node's result, after its action", e.src)
			case whereNoResult:
				v.warnf(node, key, "${%s}: a %s node has no result, so this is always missing", e.src, v.g.Nodes[node].Kind)
			}
		case root == ScopeInputs, root == ScopeRun, root == ScopeNow, root == ScopeTimestamp, w == whereHook:
		case slices.Contains(local, root):
		default:
			known := []string{ScopeState, ScopeInputs, ScopeRun}
			if w == whereAfter || w == whereNoResult {
				known = append(known, ScopeResult)
			}
			known = append(known, local...)
			msg := fmt.Sprintf("${%s}: unknown namespace `%s` (known here: %s)", e.src, root, strings.Join(known, ", "))
			if n := nearest(root, known); n != "" {
				msg = fmt.Sprintf("${%s}: unknown namespace `%s` (did you mean `%s`?)", e.src, root, n)
			}
			v.warnf(node, key, "%s", msg)
		}
	}
}

// edges checks next.
func (v *validator) edges(n *Node, w where) {
	name := n.Name
	defaults, conditional := 0, false
	for i, e := range n.Next {
		key := fmt.Sprintf("next[%d]", i)
		if len(n.Next) == 1 && e.When == nil {
			key = "next"
		}
		switch {
		case e.To == "":
			if !v.parsedAt(name, key) && !v.parsedAt(name, "next") {
				v.errorf(name, key+".to", "missing")
			}
		case v.g.Nodes[e.To] == nil:
			v.errorf(name, key, "%s", v.unknownNode(e.To))
		}
		if e.When == nil {
			defaults++
			switch {
			case defaults > 1:
				v.errorf(name, key, "a second default edge (an entry without when): only one is allowed")
			case i != len(n.Next)-1:
				v.errorf(name, key, "the default edge (the entry without when) must be last: the entries after it never match")
			}
			continue
		}
		conditional = true
		if err := e.When.Validate(); err != nil {
			v.errorf(name, key+".when", "%v", err)
		}
		v.condPaths(name, key+".when", e.When, w)
	}
	if conditional && defaults == 0 {
		v.warnf(name, "next", "no default edge: when no condition holds the step fails with no_matching_edge")
	}
	if len(n.Next) == 0 && n.Kind != KindReturn {
		v.warnf(name, "next", "missing: the run completes here with outputs {} (an implicit return)")
	}
}

// condPaths records state reads of a condition and warns about paths
// outside the scope.
func (v *validator) condPaths(node, key string, c *hooks.Condition, w where) {
	if c == nil {
		return
	}
	if s, ok := c.Value.(string); ok && hasRefs(s) {
		v.warnf(node, key, "path %s: the value %q is compared as written: condition values are not interpolated", c.Path, s)
	}
	if c.Path != "" {
		segs := strings.Split(c.Path, ".")
		switch segs[0] {
		case ScopeState:
			if len(segs) > 1 {
				v.read(segs[1], node)
			} else {
				v.readsAll = true
			}
		case ScopeInputs, ScopeRun:
		case ScopeResult:
			if w == whereNoResult {
				v.warnf(node, key, "path %s: a %s node has no result, so this is always missing", c.Path, v.g.Nodes[node].Kind)
			}
		default:
			if w != whereHook {
				v.warnf(node, key, "path %s: conditions read state, inputs, result or run (write state.%s?)", c.Path, c.Path)
			}
		}
	}
	for _, s := range c.Any {
		v.condPaths(node, key, s, w)
	}
	for _, s := range c.All {
		v.condPaths(node, key, s, w)
	}
	v.condPaths(node, key, c.Not, w)
}

func (v *validator) hooks() {
	for i, h := range v.g.Hooks {
		key := fmt.Sprintf("config.hooks[%d]", i)
		switch {
		case h.Event == "":
			v.errorf("", key+".event", "missing (one of %s)", strings.Join(Events, ", "))
		case slices.Contains(Events, h.Event):
		case hooks.KnownEvent(h.Event):
			v.errorf("", key+".event", "`%s` is a thread event and never fires for a graph (graph events: %s)", h.Event, strings.Join(Events, ", "))
		default:
			msg := fmt.Sprintf("unknown event `%s`", h.Event)
			if n := nearest(h.Event, Events); n != "" {
				msg += fmt.Sprintf(" (did you mean `%s`?)", n)
			}
			v.errorf("", key+".event", "%s (graph events: %s)", msg, strings.Join(Events, ", "))
		}
		if err := h.Condition.Validate(); err != nil {
			v.errorf("", key+".condition", "%v", err)
		}
		v.condPaths("", key+".condition", h.Condition, whereHook)
		switch {
		case h.Item != nil:
			v.exprs("", key+".action", h.Item.Params, whereHook, nil)
			if h.Item.ItemID != "" && !hasRefs(h.Item.ItemID) {
				need := thread.Capability(h.Item.Primary, h.Item.ItemType, h.Item.ItemID)
				if !thread.Match(v.g.Permissions, need) {
					v.warnf("", key+".action", "%s %s %s needs %s, which permissions do not grant", h.Item.Primary, h.Item.ItemType, h.Item.ItemID, need)
				}
			}
		case h.Action.Kind() == "":
			if !v.parsedAt("", key+".action") {
				v.errorf("", key+".action", "missing")
			}
		default:
			a := h.Action
			v.action("", key+".action", &a, nil)
		}
	}
}

// reachability warns about nodes that no path from start reaches (over
// next and on_error, and the graph-wide on_error node).
func (v *validator) reachability(order []string) {
	g := v.g
	seen := map[string]bool{}
	queue := []string{g.Start}
	if g.Nodes[g.OnError] != nil {
		queue = append(queue, g.OnError)
	}
	for len(queue) > 0 {
		name := queue[0]
		queue = queue[1:]
		n := g.Nodes[name]
		if n == nil || seen[name] {
			continue
		}
		seen[name] = true
		for _, e := range n.Next {
			queue = append(queue, e.To)
		}
		if n.OnError != "" {
			queue = append(queue, n.OnError)
		}
	}
	for _, name := range order {
		if !seen[name] {
			v.warnf(name, "", "unreachable: no next or on_error leads here from %s", g.Start)
		}
	}
}

// cycles warns about cycles of next edges that no edge leaves: the run
// can only loop until max_steps (or an error).
func (v *validator) cycles(order []string) {
	g := v.g
	succ := func(name string) []string {
		var out []string
		for _, e := range g.Nodes[name].Next {
			if g.Nodes[e.To] != nil {
				out = append(out, e.To)
			}
		}
		return out
	}
	for _, scc := range stronglyConnected(order, succ) {
		in := map[string]bool{}
		for _, n := range scc {
			in[n] = true
		}
		loop := len(scc) > 1
		exits := false
		for _, n := range scc {
			for _, s := range succ(n) {
				if s == n {
					loop = true
				}
				if !in[s] {
					exits = true
				}
			}
			if len(g.Nodes[n].Next) == 0 || g.Nodes[n].Kind == KindReturn {
				exits = true
			}
			for _, e := range g.Nodes[n].Next {
				if g.Nodes[e.To] == nil {
					exits = true // an unknown target is reported as an error already
				}
			}
		}
		if loop && !exits {
			sort.Slice(scc, func(i, j int) bool { return index(order, scc[i]) < index(order, scc[j]) })
			v.warnf(scc[0], "next", "the cycle %s → %s has no conditional exit: it ends only at max_steps or on an error", strings.Join(scc, " → "), scc[0])
		}
	}
}

func index(list []string, s string) int {
	for i, e := range list {
		if e == s {
			return i
		}
	}
	return len(list)
}

// stronglyConnected returns the strongly connected components of the
// graph over nodes (Tarjan's algorithm, iterative).
func stronglyConnected(nodes []string, succ func(string) []string) [][]string {
	idx := map[string]int{}
	low := map[string]int{}
	onStack := map[string]bool{}
	var stack []string
	var out [][]string
	next := 0
	type frame struct {
		node string
		succ []string
		i    int
	}
	for _, root := range nodes {
		if _, ok := idx[root]; ok {
			continue
		}
		work := []frame{{node: root, succ: succ(root)}}
		idx[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(work) > 0 {
			f := &work[len(work)-1]
			if f.i < len(f.succ) {
				s := f.succ[f.i]
				f.i++
				if _, ok := idx[s]; !ok {
					idx[s], low[s] = next, next
					next++
					stack = append(stack, s)
					onStack[s] = true
					work = append(work, frame{node: s, succ: succ(s)})
				} else if onStack[s] {
					low[f.node] = min(low[f.node], idx[s])
				}
				continue
			}
			n := f.node
			work = work[:len(work)-1]
			if len(work) > 0 {
				p := work[len(work)-1].node
				low[p] = min(low[p], low[n])
			}
			if low[n] == idx[n] {
				var comp []string
				for {
					top := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[top] = false
					comp = append(comp, top)
					if top == n {
						break
					}
				}
				out = append(out, comp)
			}
		}
	}
	return out
}

func (v *validator) returns(order []string) {
	if len(order) == 0 {
		return
	}
	for _, name := range order {
		if v.g.Nodes[name].Kind == KindReturn {
			return
		}
	}
	v.warnf("", "config.nodes", "no return node: the run can end only by an implicit return (outputs {}) or an error")
}

// stateFlow warns about state keys read but never written and written but
// never read (the reference's analysis). The runtime's keys (inputs,
// _last_error, _errors) count as written.
func (v *validator) stateFlow(order []string) {
	rank := func(node string) int {
		if node == "" {
			return -1
		}
		return index(order, node)
	}
	keys := sortedKeys(v.reads)
	sort.SliceStable(keys, func(i, j int) bool { return rank(v.reads[keys[i]]) < rank(v.reads[keys[j]]) })
	for _, k := range keys {
		if _, ok := v.writes[k]; ok || reservedStateKey(k) {
			continue
		}
		v.warnf(v.reads[k], "state."+k, "read but never written (no assign, collect or config.state sets it)")
	}
	if v.readsAll {
		return
	}
	keys = sortedKeys(v.writes)
	sort.SliceStable(keys, func(i, j int) bool { return rank(v.writes[keys[i]]) < rank(v.writes[keys[j]]) })
	for _, k := range keys {
		if _, ok := v.reads[k]; ok || reservedStateKey(k) {
			continue
		}
		node, key := v.writes[k], "assign."+k
		if node == "" {
			key = "config.state." + k
		} else if n := v.g.Nodes[node]; n != nil && n.Collect == k {
			if _, ok := n.Assign[k]; !ok {
				key = "collect"
			}
		}
		v.warnf(node, key, "`%s` is written but never read", k)
	}
}
