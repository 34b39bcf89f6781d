package graph

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/internal/spelling"
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
	if n := spelling.Nearest(name, v.g.order()); n != "" {
		msg += fmt.Sprintf(" (did you mean `%s`?)", n)
	}
	return msg
}

// top checks the graph-level fields: version and description (warnings
// only), permissions, start and nodes, on_error, the concurrency and step
// limits, the initial state and env_requires.
func (v *validator) top() {
	g := v.g
	if g.Version == "" {
		v.warnf("", "version", "missing: give the graph's own version")
	}
	if g.Description == "" {
		v.warnf("", "description", "missing: one line for listings and the monitor")
	}
	v.permissions()
	v.entry()
	v.graphOnError()
	v.limits()
	v.initialState()
	v.envRequires()
}

// permissions checks that the graph grants something (a graph without
// permissions fails closed) and warns about entries that are not
// capabilities.
func (v *validator) permissions() {
	g := v.g
	if len(g.Permissions) == 0 && !v.parsedAt("", "permissions") {
		v.errorf("", "permissions", "missing or empty: a graph without permissions may do nothing (fail closed)")
	}
	for _, p := range g.Permissions {
		if c := thread.NormalizeCapability(p); c != "*" && !strings.HasPrefix(c, thread.CapabilityPrefix) {
			v.warnf("", "permissions", "%q grants nothing: capabilities start with %q", p, thread.CapabilityPrefix)
		}
	}
}

// entry checks that config.start names a node and that there are nodes,
// unless Parse has already reported those keys.
func (v *validator) entry() {
	g := v.g
	switch {
	case g.Start == "" && !v.parsedAt("", "config.start"):
		v.errorf("", "config.start", "missing: name the first node")
	case g.Start != "" && g.Nodes[g.Start] == nil && len(g.Nodes) > 0:
		v.errorf("", "config.start", "%s", v.unknownNode(g.Start))
	}
	if len(g.Nodes) == 0 && !v.parsedAt("", "config.nodes") {
		v.errorf("", "config.nodes", "missing: a graph needs nodes")
	}
}

// graphOnError checks config.on_error: an error mode (fail, continue),
// which a node of the same name does not override, or a node.
func (v *validator) graphOnError() {
	g := v.g
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
}

// limits checks config.max_concurrency and max_steps against their hard
// caps; max_steps is named where the file wrote it (limits or config).
func (v *validator) limits() {
	g := v.g
	if g.MaxConcurrency < 1 || g.MaxConcurrency > MaxConcurrencyCap {
		v.errorf("", "config.max_concurrency", "must be 1..%d, not %d", MaxConcurrencyCap, g.MaxConcurrency)
	}
	ms := g.Limits.MaxSteps
	if ms == nil {
		return
	}
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

// initialState checks that config.state sets no runtime key and records
// its keys as written by the graph itself.
func (v *validator) initialState() {
	for _, k := range sortedKeys(v.g.State) {
		if reservedStateKey(k) {
			v.errorf("", "config.state."+k, "reserved: `inputs` and keys starting with _ are set by the runtime")
		}
		v.write(k, "")
	}
}

// envRequires checks that env_requires lists environment variable names.
func (v *validator) envRequires() {
	for _, e := range v.g.EnvRequires {
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

// node checks one node: its name and kind, what its kind requires, its
// assign, its edges, and its on_error, retry and timeout. A node of an
// unknown kind still has its action, assign, edges, on_error, retry and
// timeout checked.
func (v *validator) node(n *Node) {
	name := n.Name
	if !nodeNameRe.MatchString(name) {
		v.errorf(name, "", "a node name must match [A-Za-z0-9_-]{1,64}")
	}
	known := slices.Contains(Kinds, n.Kind)
	if !known && !v.parsedAt(name, "type") && !v.parsedAt(name, "node_type") {
		v.errorf(name, "type", "unknown node kind `%s` (known: %s)", n.Kind, strings.Join(Kinds, ", "))
	}
	after := whereAfter
	if n.Kind == KindGate || n.Kind == KindReturn {
		after = whereNoResult
	}
	if check := kindChecks[n.Kind]; check != nil {
		check(v, n)
	}
	// A node of an unknown kind gets every check that does not depend on
	// its kind, so that one pass reports all its errors.
	if n.Kind == KindAction || n.Kind == KindForeach || !known {
		v.action(name, "action", n.Action, n)
	}
	v.assign(n, after)
	v.edges(n, after)
	if n.OnError != "" && n.OnError != name && v.g.Nodes[n.OnError] == nil {
		v.errorf(name, "on_error", "%s", v.unknownNode(n.OnError))
	}
	v.retry(n)
	if n.Timeout < 0 {
		v.errorf(name, "timeout", "must be positive")
	}
}

// kindChecks check what each kind of node requires beyond the fields
// every node has. A gate needs nothing of its own.
var kindChecks = map[string]func(v *validator, n *Node){
	KindAction:      (*validator).actionNode,
	KindForeach:     (*validator).foreach,
	KindApproval:    (*validator).approval,
	KindWait:        (*validator).wait,
	KindSleep:       (*validator).sleep,
	KindWaitMessage: (*validator).waitMessage,
	KindReturn:      (*validator).returnNode,
}

// actionNode checks that an action node has an action, unless Parse has
// already said what is wrong with it.
func (v *validator) actionNode(n *Node) {
	if n.Action == nil && !v.parsedAt(n.Name, "action") {
		v.errorf(n.Name, "action", "missing: an action node needs an action (or type: gate)")
	}
}

// approval checks an approval node: a prompt, the expressions of prompt
// and show (read before there is a result) and on_timeout.
func (v *validator) approval(n *Node) {
	name := n.Name
	if strings.TrimSpace(n.Prompt) == "" {
		v.errorf(name, "prompt", "missing: an approval node asks a person something")
	}
	v.exprs(name, "prompt", n.Prompt, wherePre, nil)
	v.exprs(name, "show", n.Show, wherePre, nil)
	if n.OnTimeout != "deny" && n.OnTimeout != "approve" {
		v.errorf(name, "on_timeout", "must be deny or approve, not %q", n.OnTimeout)
	}
}

// wait checks a wait node: the threads to wait for, its mode, what a
// failed child does, and where the results are collected.
func (v *validator) wait(n *Node) {
	name := n.Name
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
}

// returnNode checks a return node: a next it would never follow, and its
// output (there is no result to read).
func (v *validator) returnNode(n *Node) {
	if len(n.Next) > 0 {
		v.warnf(n.Name, "next", "a return node ends the run; its next is never followed")
	}
	v.exprs(n.Name, "output", n.Output, whereNoResult, nil)
	v.output(n)
}

// assign checks a node's assign: no runtime key is written, each key
// counts as written by the node, and each value's expressions see what
// the node's kind leaves in scope (w).
func (v *validator) assign(n *Node, w where) {
	for _, k := range sortedKeys(n.Assign) {
		if reservedStateKey(k) {
			v.errorf(n.Name, "assign."+k, "cannot assign `%s`: inputs and keys starting with _ belong to the runtime", k)
		}
		v.write(k, n.Name)
		v.exprs(n.Name, "assign."+k, n.Assign[k], w, nil)
	}
}

// retry checks a node's retry block: the attempts within range, no
// negative backoff, and a max_backoff below backoff, which caps every
// delay.
func (v *validator) retry(n *Node) {
	r := n.Retry
	if r == nil {
		return
	}
	if r.Attempts < 1 || r.Attempts > MaxRetryAttempts {
		v.errorf(n.Name, "retry.attempts", "must be 1..%d (every try counts), not %d", MaxRetryAttempts, r.Attempts)
	}
	if r.Backoff < 0 || r.MaxBackoff < 0 {
		v.errorf(n.Name, "retry", "backoffs must not be negative")
	}
	if r.MaxBackoff > 0 && r.MaxBackoff < r.Backoff {
		v.warnf(n.Name, "retry.max_backoff", "is below backoff (%s < %s), so every delay is %s", formatDuration(r.MaxBackoff), formatDuration(r.Backoff), formatDuration(r.MaxBackoff))
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

// foreach checks a foreach node: the list to iterate over, the action per
// item, the item variable, the concurrency and item limits, what a
// failed item does, and where the results are collected.
func (v *validator) foreach(n *Node) {
	name := n.Name
	if strings.TrimSpace(n.Over) == "" {
		v.errorf(name, "over", "missing: a foreach needs the list to iterate over")
	}
	v.exprs(name, "over", n.Over, wherePre, nil)
	if n.Action == nil && !v.parsedAt(name, "action") {
		v.errorf(name, "action", "missing: a foreach needs the action to run per item")
	}
	v.itemName(n)
	v.foreachLimits(n)
	if n.OnItemError != OnErrorFail && n.OnItemError != OnErrorContinue {
		v.errorf(name, "on_item_error", "must be fail or continue, not %q", n.OnItemError)
	}
	v.collect(n)
}

// itemName checks a foreach's item variable (as): a name that no scope
// namespace takes and that differs from the key the results go to.
func (v *validator) itemName(n *Node) {
	switch {
	case !asNameRe.MatchString(n.As):
		v.errorf(n.Name, "as", "%q is not a name ([A-Za-z_][A-Za-z0-9_]*)", n.As)
	case slices.Contains(reservedNames, n.As):
		v.errorf(n.Name, "as", "`%s` is a namespace of the scope; choose another name", n.As)
	}
	if n.Collect != "" && n.Collect == n.As {
		v.errorf(n.Name, "collect", "equals as (`%s`): the item variable and the results key must differ", n.As)
	}
}

// foreachLimits checks a foreach's max_concurrency (which only a
// parallel foreach uses) and max_items.
func (v *validator) foreachLimits(n *Node) {
	if n.MaxConcurrency != 0 && (n.MaxConcurrency < 1 || n.MaxConcurrency > MaxConcurrencyCap) {
		v.errorf(n.Name, "max_concurrency", "must be 1..%d", MaxConcurrencyCap)
	} else if n.MaxConcurrency != 0 && !n.Parallel {
		v.warnf(n.Name, "max_concurrency", "ignored: items run one at a time unless parallel is true")
	}
	if n.MaxItems < 0 {
		v.errorf(n.Name, "max_items", "must be at least 1")
	}
	switch {
	case n.MinSuccess < 0:
		v.errorf(n.Name, "min_success", "must be at least 1")
	case n.MinSuccess > 0 && n.MaxItems > 0 && n.MinSuccess > n.MaxItems:
		v.errorf(n.Name, "min_success", "%d is more items than max_items (%d) lets the foreach have", n.MinSuccess, n.MaxItems)
	case n.MinSuccess > 0 && n.OnItemError == OnErrorContinue:
		v.warnf(n.Name, "on_item_error", "ignored with min_success: the foreach goes on past failed items until min_success items succeeded or can no longer")
	}
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
	w, local := actionScope(node, n)
	idKey := key + "." + a.Kind()
	v.exprs(node, idKey, a.ID(), w, local)
	v.exprs(node, key+".params", a.Params, w, local)
	v.exprs(node, key+".inputs", a.Inputs, w, local)
	v.exprs(node, key+".limits", a.Limits, w, local)
	v.actionLimits(node, key, a)
	if a.Timeout < 0 {
		v.errorf(node, key+".timeout", "must be positive")
	}
	if a.Tool == ShellTool {
		v.warnf(node, idKey, "rye/bash runs only on workers started with --allow-shell (elsewhere the step fails shell_not_allowed)")
	}
	v.permission(node, idKey, a)
}

// ShellTool is the built-in shell tool, which workers run only when
// started to (spool worker --allow-shell).
const ShellTool = "rye/bash"

// actionScope is what the expressions of an action can see: a hook's
// action (node "") the event's context, a foreach's action its item
// variable and loop besides the usual namespaces.
func actionScope(node string, n *Node) (where, []string) {
	switch {
	case node == "":
		return whereHook, nil
	case n != nil && n.Kind == KindForeach:
		return whereAction, []string{n.As, ScopeLoop}
	}
	return whereAction, nil
}

// actionLimits checks an action's limits when they hold no ${...} (those
// are known only at run time). A graph action's max_steps is the child
// graph's own and is left to it.
func (v *validator) actionLimits(node, key string, a *Action) {
	if len(a.Limits) == 0 {
		return
	}
	if refs, _ := refsOf(a.Limits); len(refs) > 0 {
		return
	}
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

// permission warns when the graph's permissions do not grant the action
// (section 16), or when its id is computed and so cannot be checked.
func (v *validator) permission(node, idKey string, a *Action) {
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

// expr checks the references of one ${...} expression at node/key, as w
// and the local names allow, and records the state keys it reads.
func (v *validator) expr(node, key string, e *expr, w where, local []string) {
	for _, t := range e.terms {
		if t.isLit {
			continue
		}
		root := t.path[0]
		switch {
		case root == ScopeState:
			v.readPath(t.path, node)
		case root == ScopeResult:
			v.resultRef(node, key, e, w)
		case root == ScopeInputs, root == ScopeRun, root == ScopeNow, root == ScopeTimestamp, w == whereHook:
		case slices.Contains(local, root):
		default:
			v.errorf(node, key, "%s", unknownNamespace(e, root, w, local))
		}
	}
}

// readPath records a read of state at path (its first element is
// "state"): of one key, or of the whole state when the path stops there.
func (v *validator) readPath(path []string, node string) {
	if len(path) == 1 {
		v.readsAll = true
		return
	}
	v.read(path[1], node)
}

// resultRef checks a reference to result: an error where the node has no
// result yet (its own action, or a field read before it), a warning where
// its kind never has one.
func (v *validator) resultRef(node, key string, e *expr, w where) {
	switch w {
	case whereAction:
		v.errorf(node, key, "${%s}: `result` inside the node's own action: the action runs before there is a result", e.src)
	case wherePre:
		v.errorf(node, key, "${%s}: `result` is not set yet here: it is the node's result, after its action", e.src)
	case whereNoResult:
		v.warnf(node, key, "${%s}: a %s node has no result, so this is always missing", e.src, v.g.Nodes[node].Kind)
	}
}

// unknownNamespace is the error for a reference whose root is no
// namespace in scope (it never resolves: embedded in text it fails the
// step, as a whole value it is always null): the nearest one if it is
// close, else those known there.
func unknownNamespace(e *expr, root string, w where, local []string) string {
	known := []string{ScopeState, ScopeInputs, ScopeRun}
	if w == whereAfter || w == whereNoResult {
		known = append(known, ScopeResult)
	}
	known = append(known, local...)
	if n := spelling.Nearest(root, known); n != "" {
		return fmt.Sprintf("${%s}: unknown namespace `%s` (did you mean `%s`?)", e.src, root, n)
	}
	return fmt.Sprintf("${%s}: unknown namespace `%s` (known here: %s)", e.src, root, strings.Join(known, ", "))
}

// edges checks next: every edge goes to a known node, there is at most
// one default edge and it comes last, and each condition is valid.
func (v *validator) edges(n *Node, w where) {
	name := n.Name
	defaults, conditional := 0, false
	for i, e := range n.Next {
		key := fmt.Sprintf("next[%d]", i)
		if len(n.Next) == 1 && e.When == nil {
			key = "next"
		}
		v.edgeTarget(name, key, e)
		if e.When == nil {
			defaults++
			v.defaultEdge(name, key, defaults, i == len(n.Next)-1)
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

// edgeTarget checks that the edge at key goes to a known node; a missing
// target Parse has reported already.
func (v *validator) edgeTarget(name, key string, e Edge) {
	switch {
	case e.To == "":
		if !v.parsedAt(name, key) && !v.parsedAt(name, "next") {
			v.errorf(name, key+".to", "missing")
		}
	case v.g.Nodes[e.To] == nil:
		v.errorf(name, key, "%s", v.unknownNode(e.To))
	}
}

// defaultEdge checks the default edge at key, the nth one of the node:
// only one is allowed, and it must be last, since the edges after it
// would never match.
func (v *validator) defaultEdge(name, key string, nth int, last bool) {
	switch {
	case nth > 1:
		v.errorf(name, key, "a second default edge (an entry without when): only one is allowed")
	case !last:
		v.errorf(name, key, "the default edge (the entry without when) must be last: the entries after it never match")
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
		v.condPath(node, key, c.Path, w)
	}
	for _, s := range c.Any {
		v.condPaths(node, key, s, w)
	}
	for _, s := range c.All {
		v.condPaths(node, key, s, w)
	}
	v.condPaths(node, key, c.Not, w)
}

// condPath checks the path of one condition leaf: a state path is a
// read, a result path is always missing on a node without result, and
// outside a hook (whose event context has other roots) any other root is
// not in scope.
func (v *validator) condPath(node, key, path string, w where) {
	segs := strings.Split(path, ".")
	switch segs[0] {
	case ScopeState:
		v.readPath(segs, node)
	case ScopeInputs, ScopeRun:
	case ScopeResult:
		if w == whereNoResult {
			v.warnf(node, key, "path %s: a %s node has no result, so this is always missing", path, v.g.Nodes[node].Kind)
		}
	default:
		if w != whereHook {
			v.warnf(node, key, "path %s: conditions read state, inputs, result or run (write state.%s?)", path, path)
		}
	}
}

// hooks checks each graph hook: its event, its condition and its action.
func (v *validator) hooks() {
	for i, h := range v.g.Hooks {
		key := fmt.Sprintf("config.hooks[%d]", i)
		v.hookEvent(key, h.Event)
		if err := h.Condition.Validate(); err != nil {
			v.errorf("", key+".condition", "%v", err)
		}
		v.condPaths("", key+".condition", h.Condition, whereHook)
		v.hookAction(key, h)
	}
}

// hookEvent checks that a hook's event is a graph event, telling a
// thread event (which never fires for a graph) from a misspelling.
func (v *validator) hookEvent(key, event string) {
	switch {
	case event == "":
		v.errorf("", key+".event", "missing (one of %s)", strings.Join(Events, ", "))
	case slices.Contains(Events, event):
	case hooks.KnownEvent(event):
		v.errorf("", key+".event", "`%s` is a thread event and never fires for a graph (graph events: %s)", event, strings.Join(Events, ", "))
	default:
		msg := fmt.Sprintf("unknown event `%s`", event)
		if n := spelling.Nearest(event, Events); n != "" {
			msg += fmt.Sprintf(" (did you mean `%s`?)", n)
		}
		v.errorf("", key+".event", "%s (graph events: %s)", msg, strings.Join(Events, ", "))
	}
}

// hookAction checks what a hook does: a load or search (hookItem), or an
// action checked as a node's is, in the event's scope.
func (v *validator) hookAction(key string, h Hook) {
	switch {
	case h.Item != nil:
		v.hookItem(key, h.Item)
	case h.Action.Kind() == "":
		if !v.parsedAt("", key+".action") {
			v.errorf("", key+".action", "missing")
		}
	default:
		a := h.Action
		v.action("", key+".action", &a, nil)
	}
}

// hookItem checks a hook's load or search: its params' expressions, and
// when its item id is fixed, that the permissions grant it.
func (v *validator) hookItem(key string, item *hooks.Action) {
	v.exprs("", key+".action", item.Params, whereHook, nil)
	if item.ItemID == "" || hasRefs(item.ItemID) {
		return
	}
	need := thread.Capability(item.Primary, item.ItemType, item.ItemID)
	if !thread.Match(v.g.Permissions, need) {
		v.warnf("", key+".action", "%s %s %s needs %s, which permissions do not grant", item.Primary, item.ItemType, item.ItemID, need)
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
		if t := n.TimeoutNode(); t != "" {
			queue = append(queue, t)
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
	for _, scc := range stronglyConnected(order, v.g.successors) {
		if !v.g.closedLoop(scc) {
			continue
		}
		sort.Slice(scc, func(i, j int) bool { return index(order, scc[i]) < index(order, scc[j]) })
		v.warnf(scc[0], "next", "the cycle %s → %s has no conditional exit: it ends only at max_steps or on an error", strings.Join(scc, " → "), scc[0])
	}
}

// successors are the known nodes that name's next edges go to.
func (g *Graph) successors(name string) []string {
	var out []string
	n := g.Nodes[name]
	for _, e := range n.Next {
		if g.Nodes[e.To] != nil {
			out = append(out, e.To)
		}
	}
	if t := n.TimeoutNode(); g.Nodes[t] != nil {
		out = append(out, t)
	}
	return out
}

// closedLoop reports whether the strongly connected component scc is a
// loop (several nodes, or one with an edge to itself) that the run
// cannot leave: no node of it ends the run or has an edge out of it.
func (g *Graph) closedLoop(scc []string) bool {
	in := make(map[string]bool, len(scc))
	for _, n := range scc {
		in[n] = true
	}
	loop := len(scc) > 1
	for _, n := range scc {
		if slices.Contains(g.successors(n), n) {
			loop = true
		}
		if g.leaves(n, in) {
			return false
		}
	}
	return loop
}

// leaves reports whether the run can leave the set of nodes in at node n:
// n ends the run (a return, or no next), or an edge goes outside the set.
// An edge to an unknown node counts as leaving; it is reported as an
// error already.
func (g *Graph) leaves(n string, in map[string]bool) bool {
	nd := g.Nodes[n]
	if len(nd.Next) == 0 || nd.Kind == KindReturn {
		return true
	}
	for _, e := range nd.Next {
		if g.Nodes[e.To] == nil || !in[e.To] {
			return true
		}
	}
	if t := nd.TimeoutNode(); t != "" && !in[t] {
		return true
	}
	return false
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
	t := &tarjan{succ: succ, idx: map[string]int{}, low: map[string]int{}, onStack: map[string]bool{}}
	for _, root := range nodes {
		if _, ok := t.idx[root]; !ok {
			t.walk(root)
		}
	}
	return t.out
}

// tarjan is the state of Tarjan's algorithm: each node's discovery index
// and low link, the stack of nodes not yet in a component, and the
// explicit depth-first stack of frames (so that a long chain of nodes
// cannot exhaust the goroutine's stack).
type tarjan struct {
	succ     func(string) []string
	idx, low map[string]int
	onStack  map[string]bool
	stack    []string
	work     []tarjanFrame
	next     int
	out      [][]string
}

// tarjanFrame is one node of the depth-first search and how many of its
// successors it has followed.
type tarjanFrame struct {
	node string
	succ []string
	i    int
}

// walk runs the depth-first search from root, a node not yet visited,
// until every node it reaches is in a component.
func (t *tarjan) walk(root string) {
	t.enter(root)
	for len(t.work) > 0 {
		f := &t.work[len(t.work)-1]
		if f.i < len(f.succ) {
			s := f.succ[f.i]
			f.i++
			t.follow(f.node, s)
			continue
		}
		t.leave()
	}
}

// enter visits node s: it gets the next index, goes on the stack, and
// its frame goes on the search's.
func (t *tarjan) enter(s string) {
	t.idx[s], t.low[s] = t.next, t.next
	t.next++
	t.stack = append(t.stack, s)
	t.onStack[s] = true
	t.work = append(t.work, tarjanFrame{node: s, succ: t.succ(s)})
}

// follow takes the edge from → s: a new node is entered, one still on the
// stack lowers from's low link.
func (t *tarjan) follow(from, s string) {
	if _, ok := t.idx[s]; !ok {
		t.enter(s)
	} else if t.onStack[s] {
		t.low[from] = min(t.low[from], t.idx[s])
	}
}

// leave finishes the node on top of the search: its low link passes to
// its parent, and if it is the root of a component, the component is
// popped off the stack.
func (t *tarjan) leave() {
	n := t.work[len(t.work)-1].node
	t.work = t.work[:len(t.work)-1]
	if len(t.work) > 0 {
		p := t.work[len(t.work)-1].node
		t.low[p] = min(t.low[p], t.low[n])
	}
	if t.low[n] != t.idx[n] {
		return
	}
	var comp []string
	for {
		top := t.stack[len(t.stack)-1]
		t.stack = t.stack[:len(t.stack)-1]
		t.onStack[top] = false
		comp = append(comp, top)
		if top == n {
			break
		}
	}
	t.out = append(t.out, comp)
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
	for _, k := range byFirstNode(v.reads, order) {
		if _, ok := v.writes[k]; ok || reservedStateKey(k) {
			continue
		}
		v.warnf(v.reads[k], "state."+k, "read but never written (no assign, collect or config.state sets it)")
	}
	if v.readsAll {
		return
	}
	for _, k := range byFirstNode(v.writes, order) {
		if _, ok := v.reads[k]; ok || reservedStateKey(k) {
			continue
		}
		v.warnf(v.writes[k], v.writeKey(k), "`%s` is written but never read", k)
	}
}

// byFirstNode returns the state keys of seen (key → first node) in the
// order of their nodes in order, the graph level ("") first, and by name
// among a node's keys.
func byFirstNode(seen map[string]string, order []string) []string {
	rank := func(node string) int {
		if node == "" {
			return -1
		}
		return index(order, node)
	}
	keys := sortedKeys(seen)
	sort.SliceStable(keys, func(i, j int) bool { return rank(seen[keys[i]]) < rank(seen[keys[j]]) })
	return keys
}

// writeKey is the field that first writes state key k: config.state at
// the graph level, the node's collect when only collect writes it, and
// otherwise its assign.
func (v *validator) writeKey(k string) string {
	node := v.writes[k]
	if node == "" {
		return "config.state." + k
	}
	if n := v.g.Nodes[node]; n != nil && n.Collect == k {
		if _, ok := n.Assign[k]; !ok {
			return "collect"
		}
	}
	return "assign." + k
}
