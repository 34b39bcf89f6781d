package graph

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Step failure codes this package produces, and the ones of section 9 the
// runtime produces that Retryable knows.
const (
	CodeUnresolvedReference = "unresolved_reference"
	CodeInterpolation       = "interpolation_error" // a malformed ${...}, a failing filter
	CodeNoMatchingEdge      = "no_matching_edge"
	CodeInvalidCondition    = "invalid_condition" // a condition that does not evaluate (caught by validation)
	CodeInvalidAssign       = "invalid_assign"    // an assign to inputs or a _ key (caught by validation)
	CodeForeachNotList      = "foreach_not_list"
	CodeForeachTooLarge     = "foreach_too_large"
	CodeStateTooLarge       = "state_too_large"
	CodeToolError           = "tool_error"
	CodeTimeout             = "timeout"
	CodeRateLimited         = "rate_limited"
	CodePermissionDenied    = "permission_denied"
	CodeApprovalDenied      = "approval_denied"
	CodeForeachItemFailed   = "foreach_item_failed"
	CodeForeachAllFailed    = "foreach_all_failed"
	// CodeMinSuccessUnreachable: a foreach with min_success N has too many
	// failed items for N to succeed.
	CodeMinSuccessUnreachable = "min_success_unreachable"
	CodeNodeError             = "node_error"
	CodeInvalidOutput         = "invalid_output" // a return output that is not an object
)

// StepError is a step failure (section 9). ThreadID names the child whose
// failure it is, when there is one.
type StepError struct {
	Code, Message string
	ThreadID      string
}

func (e *StepError) Error() string {
	if e.Message == "" {
		return e.Code
	}
	return e.Code + ": " + e.Message
}

// Is matches another *StepError with the same Code.
func (e *StepError) Is(target error) bool {
	var t *StepError
	return errors.As(target, &t) && t.Code == e.Code
}

// Retryable reports whether a step failure with this code may be retried
// (section 9.1): tool errors, timeouts, rate limits, and children that
// failed for a transient reason (provider_transient,
// provider_rate_limited, thread_lost). Permission and approval denials,
// validation-type codes and limit refusals other than rate limits are not.
func Retryable(code string) bool {
	switch code {
	case CodeToolError, CodeTimeout, CodeRateLimited,
		"provider_transient", "provider_rate_limited", "thread_lost":
		return true
	}
	return false
}

// Delay is the wait before attempt n (n ≥ 2) of r: Backoff, doubled for
// each further attempt, capped by MaxBackoff (10 × Backoff when unset).
// Attempt 1 and a nil r wait 0.
func (r *Retry) Delay(attempt int) time.Duration {
	if r == nil || attempt < 2 || r.Backoff <= 0 {
		return 0
	}
	ceiling := r.MaxBackoff
	if ceiling <= 0 {
		ceiling = 10 * r.Backoff
		if ceiling/10 != r.Backoff { // overflow
			ceiling = time.Duration(1<<63 - 1)
		}
	}
	d := r.Backoff
	for i := 2; i < attempt; i++ {
		if d >= ceiling/2 {
			return ceiling
		}
		d *= 2
	}
	return min(d, ceiling)
}

// StateSize is the length of state's JSON encoding (encoding/json, which
// sorts map keys), the measure of graph.max_state_bytes. A state that does
// not encode (it cannot come from JSON) measures -1.
func StateSize(state map[string]any) int {
	b, err := json.Marshal(state)
	if err != nil {
		return -1
	}
	return len(b)
}

// ForeachItems resolves a foreach's over value: a list, or a string that
// holds a JSON array. Anything else is a *StepError foreach_not_list, and
// more than limit items (DefaultMaxItems when limit ≤ 0) foreach_too_large.
func ForeachItems(v any, limit int) ([]any, error) {
	if limit <= 0 {
		limit = DefaultMaxItems
	}
	var items []any
	switch x := v.(type) {
	case []any:
		items = x
	case string:
		s := strings.TrimSpace(x)
		if !strings.HasPrefix(s, "[") {
			return nil, &StepError{Code: CodeForeachNotList, Message: "over is a string that holds no JSON array: " + clip(x, 80)}
		}
		d, err := decodeJSON([]byte(s))
		if err != nil {
			return nil, &StepError{Code: CodeForeachNotList, Message: "over is not a JSON array: " + err.Error()}
		}
		items = d.([]any)
	case nil:
		return nil, &StepError{Code: CodeForeachNotList, Message: "over resolved to nothing"}
	default:
		rv := reflect.ValueOf(v)
		if rv.Kind() != reflect.Slice && rv.Kind() != reflect.Array {
			return nil, &StepError{Code: CodeForeachNotList, Message: fmt.Sprintf("over is %s, not a list", jsonType(v))}
		}
		items = make([]any, rv.Len())
		for i := range items {
			items[i] = rv.Index(i).Interface()
		}
	}
	if len(items) > limit {
		return nil, &StepError{Code: CodeForeachTooLarge, Message: fmt.Sprintf("over has %d items, more than max_items %d", len(items), limit)}
	}
	if items == nil {
		items = []any{}
	}
	return items, nil
}

// Assign evaluates n's assign (and its collect, which is assign
// {K: ${result.results}}; an explicit assign of the same key wins) against
// scope, whose state is the state before the assign, then writes every key
// at once into a copy of state. It returns the new state and the assigned
// keys, sorted. Keys starting with "_" and "inputs" are refused with a
// *StepError invalid_assign. Values are deep copies, so the new state
// shares nothing with scope.
func Assign(n *Node, state map[string]any, scope map[string]any) (map[string]any, []string, error) {
	exprs := assignExprs(n)
	keys := make([]string, 0, len(exprs))
	for k := range exprs {
		if reservedStateKey(k) {
			return nil, nil, &StepError{Code: CodeInvalidAssign, Message: fmt.Sprintf("node %s: assign to %q is not allowed", n.Name, k)}
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	vals := make(map[string]any, len(keys))
	for _, k := range keys { // every expression reads the state before the assign
		v, err := Value(exprs[k], scope)
		if err != nil {
			return nil, nil, err
		}
		vals[k] = DeepCopy(v)
	}
	out := make(map[string]any, len(state)+len(vals))
	for k, v := range state {
		out[k] = v
	}
	for k, v := range vals {
		out[k] = v
	}
	return out, keys, nil
}

// Unresolved names, for each key of n's assign (and collect) whose value
// is a whole reference that resolved to nothing and so was assigned null
// (section 7: not an error), the reference and what its scope has where
// the path broke off: `content: ${result.content} resolved to nothing
// (result has text)`. A reference to a value that is null resolved; it
// is not named. Sorted by key; nil when every reference resolved. It is
// a warning for the step's record, the cause of many a null further on.
func Unresolved(n *Node, scope map[string]any) []string {
	exprs := assignExprs(n)
	var out []string
	for _, k := range slices.Sorted(maps.Keys(exprs)) {
		s, ok := exprs[k].(string)
		if !ok || !hasRefs(s) {
			continue
		}
		t, err := parseTemplate(s)
		if err != nil {
			continue
		}
		e := t.whole()
		if e == nil {
			continue
		}
		if _, found, err := e.eval(scope); err != nil || found {
			continue
		}
		msg := fmt.Sprintf("%s: ${%s} resolved to nothing", k, e.src)
		if has := brokeOff(scope, e); has != "" {
			msg += " (" + has + ")"
		}
		out = append(out, msg)
	}
	return out
}

// brokeOff says what the scope holds where e's first path broke off:
// "result has text, usage" when it is an object, "result is a string"
// when the path went on into something that is not one.
func brokeOff(scope map[string]any, e *expr) string {
	for _, t := range e.terms {
		if t.isLit || len(t.path) < 2 {
			continue
		}
		for i := len(t.path) - 1; i >= 1; i-- {
			v, ok := lookup(scope, t.path[:i])
			if !ok {
				continue
			}
			at := strings.Join(t.path[:i], ".")
			switch x := v.(type) {
			case map[string]any:
				keys := slices.Sorted(maps.Keys(x))
				if len(keys) == 0 {
					return at + " is an empty object"
				}
				if len(keys) > 8 {
					keys = append(keys[:8], "...")
				}
				return at + " has " + strings.Join(keys, ", ")
			case nil:
				return at + " is null"
			case string:
				return at + " is a string"
			case []any:
				return at + " is a list"
			}
			return ""
		}
		return ""
	}
	return ""
}

// assignExprs are the expressions n assigns by key: its assign, and its
// collect as {K: ${result.results}} unless the assign names K too.
func assignExprs(n *Node) map[string]any {
	exprs := make(map[string]any, len(n.Assign)+1)
	if n.Collect != "" {
		exprs[n.Collect] = "${result.results}"
	}
	for k, v := range n.Assign {
		exprs[k] = v
	}
	return exprs
}

// reservedStateKey reports whether an assign may not write k.
func reservedStateKey(k string) bool {
	return k == ScopeInputs || strings.HasPrefix(k, "_")
}

// Route picks the next node: the first edge whose condition holds on scope
// (which holds the state after the assign), else the default edge; a
// wait_message node that timed out takes its on_timeout. A node without
// next returns "" (an implicit return). No match and no default
// is a *StepError no_matching_edge.
func Route(n *Node, scope map[string]any) (next string, err error) {
	if t := n.TimeoutNode(); t != "" && TimedOut(scope[ScopeResult]) {
		return t, nil
	}
	if len(n.Next) == 0 {
		return "", nil
	}
	for i, e := range n.Next {
		ok, err := e.When.Eval(scope)
		if err != nil {
			return "", &StepError{Code: CodeInvalidCondition, Message: fmt.Sprintf("node %s: next[%d]: %v", n.Name, i, err)}
		}
		if ok {
			return e.To, nil
		}
	}
	return "", &StepError{Code: CodeNoMatchingEdge, Message: fmt.Sprintf("node %s: no condition of next holds and there is no default edge", n.Name)}
}

// Outputs interpolates a return node's output against scope (whole
// references keep their JSON type; nulls are kept) and returns the run's
// outputs: {} when the node has no output or it resolves to null. An
// output that is not an object is a *StepError invalid_output.
func Outputs(n *Node, scope map[string]any) (map[string]any, error) {
	v, err := Value(n.Output, scope)
	if err != nil {
		return nil, err
	}
	switch x := v.(type) {
	case nil:
		return map[string]any{}, nil
	case map[string]any:
		return DeepCopy(x).(map[string]any), nil
	}
	return nil, &StepError{Code: CodeInvalidOutput, Message: fmt.Sprintf("node %s: output is %s, not an object", n.Name, jsonType(v))}
}

// RunScope is the run namespace of a step's scope (section 7).
type RunScope struct {
	ID, Graph, GraphDigest, ParentID string
	Step                             int
	Node                             string
	Attempt                          int
	StartedAt                        time.Time // the step's logical start: the checkpoint it starts from
	IdempotencyKey                   string    // "" is "<id>/<step>"
}

// Map is r as the scope's "run" object.
func (r RunScope) Map() map[string]any {
	key := r.IdempotencyKey
	if key == "" {
		key = r.ID + "/" + strconv.Itoa(r.Step)
	}
	m := map[string]any{
		"id": r.ID, "graph": r.Graph, "graph_digest": r.GraphDigest, "parent_id": r.ParentID,
		"step": r.Step, "node": r.Node, "attempt": r.Attempt, "idempotency_key": key,
	}
	if !r.StartedAt.IsZero() {
		m["started_at"] = r.StartedAt.UTC().Format(time.RFC3339Nano)
	}
	return m
}

// NewScope builds a step's scope: state, inputs, run, and result when
// result is not nil (a gate or return node has none, so result.* is
// missing there).
func NewScope(state, inputs map[string]any, result any, run RunScope) map[string]any {
	s := map[string]any{ScopeState: state, ScopeInputs: inputs, ScopeRun: run.Map()}
	if result != nil {
		s[ScopeResult] = result
	}
	return s
}

// ItemScope is the scope of item index of count in a foreach: base
// without result, plus <as>, loop.index, loop.count, and the item's
// idempotency key "<run>/<step>/<index>".
func ItemScope(base map[string]any, as string, item any, index, count int) map[string]any {
	s := make(map[string]any, len(base)+2)
	for k, v := range base {
		if k != ScopeResult {
			s[k] = v
		}
	}
	if run, ok := base[ScopeRun].(map[string]any); ok {
		r := make(map[string]any, len(run))
		for k, v := range run {
			r[k] = v
		}
		r["idempotency_key"] = fmt.Sprintf("%v/%v/%d", run["id"], run["step"], index)
		s[ScopeRun] = r
	}
	if as == "" {
		as = "item"
	}
	s[as] = item
	s[ScopeLoop] = map[string]any{"index": index, "count": count}
	return s
}

// DeepCopy copies maps and lists inside v (a decoded JSON or YAML value).
func DeepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = DeepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = DeepCopy(e)
		}
		return out
	}
	return v
}

// jsonType names v's JSON type for messages.
func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case map[string]any:
		return "an object"
	case []any:
		return "a list"
	}
	if _, ok := toFloat(v); ok {
		return "a number"
	}
	return fmt.Sprintf("a %T", v)
}

// clip cuts s to n bytes (at a rune boundary) with an ellipsis.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
