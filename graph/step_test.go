package graph

import (
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/hooks"
)

func cond(path, op string, v any) *hooks.Condition {
	return &hooks.Condition{Path: path, Op: op, Value: v}
}

func TestRoute(t *testing.T) {
	t.Parallel()
	scope := map[string]any{
		"state":  map[string]any{"count": "12\n", "label": "b", "n": 3},
		"result": map[string]any{"ok": true},
	}
	tests := []struct {
		name  string
		edges []Edge
		want  string
		code  string
	}{
		{"no next is an implicit return", nil, "", ""},
		{"unconditional", []Edge{{To: "x"}}, "x", ""},
		{"first match wins", []Edge{{When: cond("state.n", "gt", 1), To: "first"}, {When: cond("state.n", "gt", 2), To: "second"}, {To: "dflt"}}, "first", ""},
		{"skips false conditions", []Edge{{When: cond("state.n", "lt", 1), To: "no"}, {When: cond("result.ok", "eq", true), To: "yes"}, {To: "dflt"}}, "yes", ""},
		{"default last", []Edge{{When: cond("state.n", "eq", 9), To: "no"}, {To: "dflt"}}, "dflt", ""},
		{"typed comparison of tool output", []Edge{{When: cond("state.count", "gt", "5"), To: "big"}, {To: "small"}}, "big", ""},
		{"typed comparison numeric value", []Edge{{When: cond("state.count", "gt", 5), To: "big"}, {To: "small"}}, "big", ""},
		{"missing path is unequal", []Edge{{When: cond("state.nope", "eq", nil), To: "no"}, {To: "dflt"}}, "dflt", ""},
		{"combinators", []Edge{{When: &hooks.Condition{Any: []*hooks.Condition{cond("state.label", "eq", "a"), cond("state.label", "in", []any{"b", "c"})}}, To: "any"}, {To: "dflt"}}, "any", ""},
		{"no match and no default", []Edge{{When: cond("state.n", "eq", 9), To: "no"}}, "", CodeNoMatchingEdge},
		{"bad condition", []Edge{{When: cond("state.n", "neq", 9), To: "no"}}, "", CodeInvalidCondition},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Route(&Node{Name: "n", Next: tt.edges}, scope)
			if tt.code != "" {
				var se *StepError
				require.True(t, errors.As(err, &se), "%v", err)
				require.Equal(t, tt.code, se.Code)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestAssign(t *testing.T) {
	t.Parallel()
	state := map[string]any{"a": 1, "b": 2, "list": []any{1, 2}, "inputs": map[string]any{"x": 1}}
	n := &Node{Name: "swap", Assign: map[string]any{
		"a":     "${state.b}",
		"b":     "${state.a}",
		"sum":   "a=${state.a} b=${state.b}",
		"copy":  "${state.list}",
		"items": "${result.results}",
		"lit":   []any{"${state.a}", true},
	}, Collect: "items"}
	scope := map[string]any{"state": state, "result": map[string]any{"results": []any{"r0", nil}}}
	got, keys, err := Assign(n, state, scope)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b", "copy", "items", "lit", "sum"}, keys)
	require.Equal(t, map[string]any{
		"a": 2, "b": 1, // both read the state before the assign
		"sum":    "a=1 b=2",
		"copy":   []any{1, 2},
		"items":  []any{"r0", nil},
		"lit":    []any{1, true},
		"list":   []any{1, 2},
		"inputs": map[string]any{"x": 1},
	}, got)
	require.Equal(t, 1, state["a"], "the old state is not modified")
	got["copy"].([]any)[0] = 99
	require.Equal(t, 1, state["list"].([]any)[0], "assigned values are copies")

	collectOnly := &Node{Name: "fe", Collect: "out"}
	got, keys, err = Assign(collectOnly, state, scope)
	require.NoError(t, err)
	require.Equal(t, []string{"out"}, keys)
	require.Equal(t, []any{"r0", nil}, got["out"])

	for _, bad := range []string{"inputs", "_last_error"} {
		_, _, err := Assign(&Node{Name: "n", Assign: map[string]any{bad: 1}}, state, scope)
		require.ErrorIs(t, err, &StepError{Code: CodeInvalidAssign})
	}
	_, _, err = Assign(&Node{Name: "n", Assign: map[string]any{"x": "a ${state.nope}"}}, state, scope)
	require.ErrorIs(t, err, &StepError{Code: CodeUnresolvedReference})
}

// TestUnresolved: a whole reference that resolves to nothing is assigned
// null and named, with what its scope had where the path broke off; a
// reference to a null, a fallback that resolves, a literal and text are
// not.
func TestUnresolved(t *testing.T) {
	t.Parallel()
	scope := map[string]any{
		"state":  map[string]any{"gone": nil, "name": "x"},
		"result": map[string]any{"text": "hello", "usage": map[string]any{}, "n": 3},
	}
	n := &Node{Name: "read", Assign: map[string]any{
		"content":  "${result.content}",          // fs_read's result is {"text": ...}
		"deep":     "${result.usage.tokens}",     // an empty object
		"inner":    "${result.text.first}",       // into a string
		"chain":    "${result.nope || state.no}", // no term resolves
		"other":    "${other.x}",                 // nothing in scope by that name
		"null":     "${state.gone}",              // resolves, to null
		"fallback": "${result.nope || state.name}",
		"default":  `${result.nope || "d"}`,
		"lit":      42,
		"text":     "t ${state.name}",
	}}
	require.Equal(t, []string{
		"chain: ${result.nope || state.no} resolved to nothing (result has n, text, usage)",
		"content: ${result.content} resolved to nothing (result has n, text, usage)",
		"deep: ${result.usage.tokens} resolved to nothing (result.usage is an empty object)",
		"inner: ${result.text.first} resolved to nothing (result.text is a string)",
		"other: ${other.x} resolved to nothing",
	}, Unresolved(n, scope))
	require.Nil(t, Unresolved(&Node{Name: "ok", Assign: map[string]any{"a": "${state.name}"}}, scope))
	require.Equal(t, []string{"out: ${result.results} resolved to nothing (result has n, text, usage)"},
		Unresolved(&Node{Name: "fe", Collect: "out"}, scope))
}

// TestAssignOrderIndependent: Assign's outcome does not depend on the order
// the assign map's keys were inserted in (nor on Go's map iteration).
func TestAssignOrderIndependent(t *testing.T) {
	t.Parallel()
	prop := func(seed int64, nkeys uint8) bool {
		rng := rand.New(rand.NewSource(seed))
		n := int(nkeys%12) + 2
		state := map[string]any{}
		type kv struct {
			k string
			v any
		}
		var exprs []kv
		for i := 0; i < n; i++ {
			k := fmt.Sprintf("k%d", i)
			state[k] = rng.Intn(100)
			// each expression reads other keys, which the same assign rewrites
			other := fmt.Sprintf("k%d", rng.Intn(n))
			switch rng.Intn(3) {
			case 0:
				exprs = append(exprs, kv{k, "${state." + other + "}"})
			case 1:
				exprs = append(exprs, kv{k, "${state." + other + "}+${state.k0}"})
			default:
				exprs = append(exprs, kv{k, []any{"${state." + other + "}", i}})
			}
		}
		build := func(order []int) map[string]any {
			m := map[string]any{}
			for _, i := range order {
				m[exprs[i].k] = exprs[i].v
			}
			return m
		}
		var first map[string]any
		for trial := 0; trial < 20; trial++ {
			order := rng.Perm(n)
			node := &Node{Name: "p", Assign: build(order)}
			got, _, err := Assign(node, state, map[string]any{"state": state})
			if err != nil {
				return false
			}
			if first == nil {
				first = got
			} else if !reflect.DeepEqual(first, got) {
				return false
			}
		}
		return true
	}
	require.NoError(t, quick.Check(prop, &quick.Config{MaxCount: 300}))
}

func TestForeachItems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   any
		max  int
		want []any
		code string
	}{
		{"list", []any{1, "a"}, 0, []any{1, "a"}, ""},
		{"empty list", []any{}, 0, []any{}, ""},
		{"typed slice", []string{"a", "b"}, 0, []any{"a", "b"}, ""},
		{"JSON array string", " [1, {\"a\": 2}]\n", 0, []any{1, map[string]any{"a": 2}}, ""},
		{"at the limit", []any{1, 2}, 2, []any{1, 2}, ""},
		{"over the limit", []any{1, 2, 3}, 2, nil, CodeForeachTooLarge},
		{"over the default limit", make([]any, DefaultMaxItems+1), 0, nil, CodeForeachTooLarge},
		{"JSON over the limit", "[1,2,3]", 2, nil, CodeForeachTooLarge},
		{"null", nil, 0, nil, CodeForeachNotList},
		{"object", map[string]any{"a": 1}, 0, nil, CodeForeachNotList},
		{"text", "a,b", 0, nil, CodeForeachNotList},
		{"JSON object string", `{"a":1}`, 0, nil, CodeForeachNotList},
		{"broken JSON", "[1,", 0, nil, CodeForeachNotList},
		{"number", 3, 0, nil, CodeForeachNotList},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ForeachItems(tt.in, tt.max)
			if tt.code != "" {
				require.ErrorIs(t, err, &StepError{Code: tt.code})
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestRetryDelay(t *testing.T) {
	t.Parallel()
	r := &Retry{Attempts: 6, Backoff: 10 * time.Second}
	want := []time.Duration{0, 0, 10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, 100 * time.Second, 100 * time.Second}
	for attempt, w := range want {
		require.Equal(t, w, r.Delay(attempt), "attempt %d", attempt)
	}
	capped := &Retry{Attempts: 5, Backoff: time.Second, MaxBackoff: 3 * time.Second}
	require.Equal(t, 2*time.Second, capped.Delay(3))
	require.Equal(t, 3*time.Second, capped.Delay(4))
	require.Equal(t, 3*time.Second, capped.Delay(50))
	huge := &Retry{Attempts: 10, Backoff: time.Duration(1 << 61)}
	require.Positive(t, huge.Delay(10))
	var none *Retry
	require.Zero(t, none.Delay(3))
}

func TestRetryable(t *testing.T) {
	t.Parallel()
	for _, c := range []string{"tool_error", "timeout", "rate_limited", "provider_transient", "provider_rate_limited", "thread_lost"} {
		require.True(t, Retryable(c), c)
	}
	for _, c := range []string{"permission_denied", "approval_denied", "unresolved_reference", "no_matching_edge", "foreach_not_list",
		"state_too_large", "spend_exceeded", "spawns_exceeded", "depth_exceeded", "provider_permanent", "cancelled", ""} {
		require.False(t, Retryable(c), c)
	}
}

func TestStateSize(t *testing.T) {
	t.Parallel()
	require.Equal(t, len(`{"a":1,"b":"<"}`)+len(`\u003c`)-1, StateSize(map[string]any{"b": "<", "a": 1}))
	require.Equal(t, 2, StateSize(map[string]any{}))
	require.Equal(t, -1, StateSize(map[string]any{"f": func() {}}))
}

func TestCapability(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a    Action
		want string
	}{
		{Action{Tool: "git/changed_files"}, "rye.execute.tool.git.changed_files"},
		{Action{Directive: "review/file"}, "rye.execute.directive.review.file"},
		{Action{Graph: "review/pr_review"}, "rye.execute.graph.review.pr_review"},
		{Action{}, ""},
	}
	for _, tt := range tests {
		require.Equal(t, tt.want, tt.a.Capability())
	}
	caps := []string{"rye.execute.tool.git.*", "rye.execute.directive.review.*"}
	require.True(t, Permitted(caps, &Action{Tool: "git/log"}))
	require.False(t, Permitted(caps, &Action{Tool: "rye/bash"}))
	require.True(t, Permitted(caps, &Action{Directive: "review/file"}))
	require.False(t, Permitted(caps, &Action{Directive: "deploy/prod"}))
	require.True(t, Permitted([]string{"rye.execute.tool.rye.agent.threads.thread_directive"}, &Action{Directive: "deploy/prod"}), "thread_directive grants every directive")
	require.False(t, Permitted([]string{"rye.execute.tool.rye.agent.threads.thread_directive"}, &Action{Graph: "g"}))
	require.True(t, Permitted([]string{"*"}, &Action{Graph: "g"}))
	require.False(t, Permitted(nil, &Action{Tool: "x"}))
	require.False(t, Permitted([]string{"*"}, &Action{}))
}

func TestInitialState(t *testing.T) {
	t.Parallel()
	g := &Graph{State: map[string]any{"blockers": 0, "list": []any{1}, "inputs": "overwritten"}}
	in := map[string]any{"repo": "x"}
	st := g.InitialState(in)
	require.Equal(t, map[string]any{"blockers": 0, "list": []any{1}, "inputs": map[string]any{"repo": "x"}}, st)
	st["list"].([]any)[0] = 2
	st["inputs"].(map[string]any)["repo"] = "y"
	require.Equal(t, 1, g.State["list"].([]any)[0])
	require.Equal(t, "x", in["repo"])
	require.Equal(t, map[string]any{"inputs": map[string]any{}}, (&Graph{}).InitialState(nil))
}

func TestOutputs(t *testing.T) {
	t.Parallel()
	scope := map[string]any{"state": map[string]any{"v": "x", "obj": map[string]any{"k": []any{1}}, "n": 3}}
	tests := []struct {
		name   string
		output any
		want   map[string]any
		code   string
	}{
		{"none", nil, map[string]any{}, ""},
		{"mapping", map[string]any{"v": "${state.v}", "missing": "${state.nope}", "n": "${state.n}"}, map[string]any{"v": "x", "missing": nil, "n": 3}, ""},
		{"whole object", "${state.obj}", map[string]any{"k": []any{1}}, ""},
		{"whole null", "${state.nope}", map[string]any{}, ""},
		{"not an object", "${state.n}", nil, CodeInvalidOutput},
		{"unresolved", map[string]any{"t": "a ${state.nope}"}, nil, CodeUnresolvedReference},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Outputs(&Node{Name: "done", Kind: KindReturn, Output: tt.output}, scope)
			if tt.code != "" {
				require.ErrorIs(t, err, &StepError{Code: tt.code})
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
	got, err := Outputs(&Node{Output: "${state.obj}"}, scope)
	require.NoError(t, err)
	got["k"].([]any)[0] = 2
	require.Equal(t, 1, scope["state"].(map[string]any)["obj"].(map[string]any)["k"].([]any)[0], "outputs share nothing with the state")
}
