package hooks

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
)

const projectYAML = `
hooks:
  - id: "inject_project_conventions"
    event: "thread_started"
    action:
      primary: "load"
      item_type: "knowledge"
      item_id: "project/conventions"
    description: "Inject project conventions into every thread"

  - id: "inject_api_types"
    event: "thread_started"
    condition:
      path: "directive"
      op: "contains"
      value: "api"
    action:
      primary: "load"
      item_type: "knowledge"
      item_id: "project/api-types"

  - id: "record_learnings"
    event: "after_complete"
    condition:
      all:
        - {path: "cost.turns", op: "gte", value: 3}
        - not: {path: "directive", op: "regex", value: "^test/"}
    action:
      primary: "execute"
      item_type: "directive"
      item_id: "project/record-learnings"
      params: {thread: "${thread_id}", n: 2, nested: {t: "${cost.turns}"}}
  - event: "after_step"
    action: {primary: search, item_type: knowledge, params: {query: "notes ${thread_id}"}}
`

func TestParseYAML(t *testing.T) {
	hs, err := ParseYAML("hooks.yaml", []byte(projectYAML), LayerProject)
	require.NoError(t, err)
	require.Len(t, hs, 4)
	require.Equal(t, "inject_project_conventions", hs[0].ID, "hooks[0] = %+v", hs[0])
	require.Equal(t, LayerProject, hs[0].Layer, "hooks[0] = %+v", hs[0])
	require.NotEmpty(t, hs[0].Description, "hooks[0] = %+v", hs[0])
	require.Equal(t, Action{Primary: "load", ItemType: "knowledge", ItemID: "project/conventions"}, hs[0].Action, "hooks[0] = %+v", hs[0])
	if c := hs[1].Condition; c == nil || c.Path != "directive" || c.Op != "contains" || c.Value != "api" {
		t.Errorf("hooks[1].Condition = %+v", c)
	}
	if c := hs[2].Condition; c == nil || len(c.All) != 2 || c.All[1].Not == nil || c.All[0].Value != 3 {
		t.Errorf("hooks[2].Condition = %+v", c)
	}
	require.Equal(t, "hook_4", hs[3].ID, "default id")
	// bare list form, empty file
	hs, err = ParseYAML("h.yaml", []byte("- {id: a, event: error, action: {primary: fail}}\n"), 0)
	require.NoError(t, err, "list form: %v", hs)
	require.Len(t, hs, 1, "list form: %v %v", hs, err)
	hs, err = ParseYAML("h.yaml", []byte(""), 0)
	require.NoError(t, err, "empty: %v", hs)
	require.Nil(t, hs, "empty: %v %v", hs, err)
	bad := map[string]string{
		"hooks: [{id: a, event: nope, action: {primary: load, item_type: k, item_id: x}}]": `h.yaml: hooks[0]: hook "a": unknown event "nope"`,
		"hooks: [{id: a, event: error}]":                                                                       `h.yaml: hooks[0]: hook "a": action: missing primary`,
		"hooks: [{id: a, event: error, action: {primary: zap}}]":                                               `unknown primary "zap"`,
		"hooks: [{id: a, event: error, action: {primary: load, item_id: x}}]":                                  "missing item_type",
		"hooks: [{id: a, event: error, condition: {path: x, op: regex, value: '('}, action: {primary: fail}}]": `hook "a": condition: x regex "("`,
		"hooks: {a: 1}": "h.yaml: yaml",
		"hooks: [{id: a, event: error, condition: {path: x, op: between}, action: {primary: fail}}]": `unknown op "between"`,
	}
	for src, want := range bad {
		_, err := ParseYAML("h.yaml", []byte(src), 0)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseYAML(%q) = %v, want %q", src, err, want)
		}
	}
}

func TestLoad(t *testing.T) {
	fsys := fstest.MapFS{HooksPath: {Data: []byte(projectYAML)}}
	hs, err := Load(fsys, LayerUser)
	require.NoError(t, err, "Load: %d", len(hs))
	require.Len(t, hs, 4, "Load: %d %v", len(hs), err)
	require.Equal(t, LayerUser, hs[0].Layer, "Load: %d %v", len(hs), err)
	legacy := fstest.MapFS{LegacyHooksPath: {Data: []byte(projectYAML)}}
	hs, err = Load(legacy, LayerUser)
	require.NoError(t, err, "legacy path: %d", len(hs))
	require.Len(t, hs, 4, "legacy path: %d %v", len(hs), err)
	hs, err = Load(fstest.MapFS{}, LayerUser)
	require.NoError(t, err, "missing file: %v", hs)
	require.Nil(t, hs, "missing file: %v %v", hs, err)
	hs, err = Load(nil, LayerUser)
	require.NoError(t, err, "nil fs: %v", hs)
	require.Nil(t, hs, "nil fs: %v %v", hs, err)
}

func TestMerge(t *testing.T) {
	h := func(id string, layer int) Hook { return Hook{ID: id, Layer: layer} }
	got := Merge(
		[]Hook{h("u1", 9), h("u2", 9)},
		[]Hook{h("d1", 0)},
		[]Hook{h("b1", 0), h("b2", 0)},
		[]Hook{h("p1", 0)},
		[]Hook{h("i1", 0)},
	)
	var ids []string
	var layers []int
	for _, x := range got {
		ids = append(ids, x.ID)
		layers = append(layers, x.Layer)
	}
	if diff := cmp.Diff([]string{"u1", "u2", "d1", "b1", "b2", "p1", "i1"}, ids); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{0, 0, 1, 2, 2, 3, 4}, layers); diff != "" {
		t.Errorf("layers (-want +got):\n%s", diff)
	}
}

type call struct {
	Op, ItemType, ItemID string
	Params               map[string]any
}

type fakeRunner struct {
	calls []call
	fail  string // item id whose action fails
}

func (f *fakeRunner) Load(_ context.Context, itemType, itemID string) (string, error) {
	f.calls = append(f.calls, call{"load", itemType, itemID, nil})
	if itemID == f.fail {
		return "", errors.New("boom")
	}
	return "<" + itemID + ">", nil
}

func (f *fakeRunner) Execute(_ context.Context, itemType, itemID string, params map[string]any) (string, error) {
	f.calls = append(f.calls, call{"execute", itemType, itemID, params})
	if itemID == f.fail {
		return "", errors.New("boom")
	}
	return "ran " + itemID, nil
}

func (f *fakeRunner) Search(_ context.Context, itemType, query string) (string, error) {
	f.calls = append(f.calls, call{"search", itemType, query, nil})
	return "found " + query, nil
}

func TestDispatcherRun(t *testing.T) {
	project, err := ParseYAML("hooks.yaml", []byte(projectYAML), LayerProject)
	require.NoError(t, err)
	directive := []Hook{
		{ID: "inject_api_schema", Event: EventThreadStarted, Action: Action{Primary: PrimaryExecute, ItemType: "knowledge", ItemID: "agent/threads/${inputs.api_thread_id}"}},
		{ID: "stop", Event: EventThreadStarted, Action: Action{Primary: PrimaryFail}}, // control: not run
	}
	user := []Hook{{ID: "user_first", Event: EventThreadStarted, Action: Action{Primary: PrimaryLoad, ItemType: "knowledge", ItemID: "me/prefs"}}}
	d := NewDispatcher(Merge(user, directive, Builtin(config.DefaultRetryPolicy()), project, nil))

	r := &fakeRunner{}
	evctx := map[string]any{"directive": "agency/api-builder", "inputs": map[string]any{"api_thread_id": "implement_api/implement_api-1740200200"}}
	outs, err := d.Run(context.Background(), EventThreadStarted, evctx, r)
	require.NoError(t, err)
	wantCalls := []call{
		{"load", "knowledge", "me/prefs", nil},
		{"load", "knowledge", "agent/threads/implement_api/implement_api-1740200200", nil},
		{"load", "knowledge", "project/conventions", nil},
		{"load", "knowledge", "project/api-types", nil},
	}
	if diff := cmp.Diff(wantCalls, r.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	want := "<me/prefs>\n\n<agent/threads/implement_api/implement_api-1740200200>\n\n<project/conventions>\n\n<project/api-types>"
	got := InjectedContext(outs)
	require.Equal(t, want, got, "InjectedContext")

	// Conditions filter; params interpolate (nested too, non-strings kept).
	r = &fakeRunner{}
	outs, err = d.Run(context.Background(), EventAfterComplete, map[string]any{"thread_id": "t-9", "cost": map[string]any{"turns": 5}, "directive": "x"}, r)
	require.NoError(t, err, "after_complete: %v", outs)
	require.Len(t, outs, 1, "after_complete: %v %v", outs, err)
	wantCalls = []call{{"execute", "directive", "project/record-learnings", map[string]any{"thread": "t-9", "n": 2, "nested": map[string]any{"t": "5"}}}}
	if diff := cmp.Diff(wantCalls, r.calls); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
	require.Empty(t, outs[0].Context, "execute outcome = %+v", outs[0])
	require.Equal(t, "ran project/record-learnings", outs[0].Result, "execute outcome = %+v", outs[0])
	r = &fakeRunner{}
	outs, _ = d.Run(context.Background(), EventAfterComplete, map[string]any{"cost": map[string]any{"turns": 5}, "directive": "test/x"}, r)
	require.Empty(t, outs, "not-condition ignored")
	// search query from params
	r = &fakeRunner{}
	outs, err = d.Run(context.Background(), EventAfterStep, map[string]any{"thread_id": "t-1"}, r)
	require.NoError(t, err, "search: %+v", outs)
	require.Len(t, outs, 1, "search: %+v %v", outs, err)
	require.Equal(t, "found notes t-1", outs[0].Result, "search: %+v %v", outs, err)

	// A failing action is reported; the others still run.
	r = &fakeRunner{fail: "project/conventions"}
	outs, err = d.Run(context.Background(), EventThreadStarted, evctx, r)
	require.Error(t, err, "failing action: %v %+v", err, outs)
	require.Contains(t, err.Error(), "inject_project_conventions", "failing action: %v %+v", err, outs)
	require.Len(t, outs, 4, "failing action: %v", err)
	require.Error(t, outs[2].Err, "failing action: %v %+v", err, outs)
	got = InjectedContext(outs)
	require.NotContains(t, got, "conventions", "failed load injected")
	// A cancelled context stops the run.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = d.Run(ctx, EventThreadStarted, evctx, &fakeRunner{})
	require.ErrorIs(t, err, context.Canceled, "cancelled")
}

func TestDecide(t *testing.T) {
	builtin := Builtin(config.DefaultRetryPolicy())
	errCtx := func(class string, attempt int, extra ...any) map[string]any {
		m := map[string]any{"error": "x", "classification": class, "attempt": attempt}
		for i := 0; i+1 < len(extra); i += 2 {
			m[extra[i].(string)] = extra[i+1]
		}
		return m
	}
	limitCtx := map[string]any{"limit_code": "spend_exceeded", "current_value": 1.2, "current_max": 1.0}
	userContinue := Hook{ID: "raise_spend", Event: EventLimit, Layer: LayerUser,
		Condition: &Condition{Path: "limit_code", Op: "eq", Value: "spend_exceeded"},
		Action:    Action{Primary: PrimaryContinue, Params: map[string]any{"spend": "${current_max}"}}}
	projectNoRetry := Hook{ID: "no_retry", Event: EventError, Layer: LayerProject, Action: Action{Primary: PrimaryFail, Params: map[string]any{"code": "project_says_no"}}}
	projectCap := Hook{ID: "cap_waits", Event: EventError, Layer: LayerProject,
		Condition: &Condition{Path: "classification", Op: "eq", Value: "rate_limited"},
		Action:    Action{Primary: PrimaryRetry, Params: map[string]any{"max_retries": 2}}}
	logOnly := Hook{ID: "log", Event: EventLimit, Layer: LayerProject, Action: Action{Primary: PrimaryExecute, ItemType: "tool", ItemID: "log"}}

	tests := []struct {
		name  string
		hooks []Hook
		event string
		ctx   map[string]any
		want  Decision
	}{
		{"transient attempt 1", builtin, EventError, errCtx("transient", 1), Decision{Action: Retry, Delay: 2 * time.Second, HookID: "builtin_retry_transient"}},
		{"transient attempt 2", builtin, EventError, errCtx("transient", 2), Decision{Action: Retry, Delay: 4 * time.Second, HookID: "builtin_retry_transient"}},
		{"rate limited attempt 3", builtin, EventError, errCtx("rate_limited", 3), Decision{Action: Retry, Delay: 8 * time.Second, HookID: "builtin_wait_rate_limited"}},
		{"rate limited past the transient retries", builtin, EventError, errCtx("rate_limited", 4), Decision{Action: Retry, Delay: 16 * time.Second, HookID: "builtin_wait_rate_limited"}},
		{"rate limited for long: the policy's max", builtin, EventError, errCtx("rate_limited", 40), Decision{Action: Retry, Delay: 120 * time.Second, HookID: "builtin_wait_rate_limited"}},
		{"retries exhausted", builtin, EventError, errCtx("transient", 4), Decision{Action: Fail, Code: "transient", HookID: "builtin_retry_transient"}},
		{"retry_after honoured", builtin, EventError, errCtx("rate_limited", 1, "retry_after", 30), Decision{Action: Retry, Delay: 30 * time.Second, HookID: "builtin_wait_rate_limited"}},
		{"retry_after as text", builtin, EventError, errCtx("rate_limited", 1, "retry_after", "1.5"), Decision{Action: Retry, Delay: 1500 * time.Millisecond, HookID: "builtin_wait_rate_limited"}},
		{"retry_after on the 100th wait", builtin, EventError, errCtx("rate_limited", 100, "retry_after", 1), Decision{Action: Retry, Delay: time.Second, HookID: "builtin_wait_rate_limited"}},
		{"transient retry_after honoured", builtin, EventError, errCtx("transient", 2, "retry_after", 5), Decision{Action: Retry, Delay: 5 * time.Second, HookID: "builtin_retry_transient"}},
		{"attempt missing means 1", builtin, EventError, map[string]any{"classification": "transient"}, Decision{Action: Retry, Delay: 2 * time.Second, HookID: "builtin_retry_transient"}},
		{"permanent fails", builtin, EventError, errCtx("permanent", 1), Decision{Action: Fail, Code: "permanent", HookID: "builtin_fail_error"}},
		{"cancelled fails", builtin, EventError, errCtx("cancelled", 1), Decision{Action: Fail, Code: "cancelled", HookID: "builtin_fail_error"}},
		{"limit fails with code", builtin, EventLimit, limitCtx, Decision{Action: Fail, Code: "spend_exceeded", HookID: "builtin_fail_limit"}},
		{"user hook handles limit", Merge([]Hook{userContinue}, nil, builtin, nil, nil), EventLimit, limitCtx,
			Decision{Action: Continue, HookID: "raise_spend", Params: map[string]any{"spend": "1"}}},
		{"user hook condition unmet", Merge([]Hook{userContinue}, nil, builtin, nil, nil), EventLimit, map[string]any{"limit_code": "turns_exceeded"},
			Decision{Action: Fail, Code: "turns_exceeded", HookID: "builtin_fail_limit"}},
		{"project hook after builtin still wins", Merge(nil, nil, builtin, []Hook{projectNoRetry}, nil), EventError, errCtx("transient", 1),
			Decision{Action: Fail, Code: "project_says_no", HookID: "no_retry", Params: map[string]any{"code": "project_says_no"}}},
		{"item action does not handle a limit", Merge(nil, nil, builtin, []Hook{logOnly}, nil), EventLimit, limitCtx,
			Decision{Action: Fail, Code: "spend_exceeded", HookID: "builtin_fail_limit"}},
		{"no hooks: error fails", nil, EventError, errCtx("transient", 1), Decision{Action: Fail, Code: "transient"}},
		{"no hooks: limit fails", nil, EventLimit, limitCtx, Decision{Action: Fail, Code: "spend_exceeded"}},
		{"no hooks: limit without code", nil, EventLimit, map[string]any{}, Decision{Action: Fail, Code: "limit_exceeded"}},
		{"other events continue", builtin, EventAfterStep, map[string]any{}, Decision{Action: Continue}},
		{"custom policy", Builtin(config.RetryPolicy{MaxRetries: 5, Base: 3, Max: 10 * time.Second}), EventError, errCtx("transient", 4),
			Decision{Action: Retry, Delay: 10 * time.Second, HookID: "builtin_retry_transient"}},
		{"zero retries", Builtin(config.RetryPolicy{MaxRetries: 0, Base: 2, Max: time.Minute}), EventError, errCtx("transient", 1),
			Decision{Action: Fail, Code: "transient", HookID: "builtin_retry_transient"}},
		{"zero retries still waits out a rate limit", Builtin(config.RetryPolicy{MaxRetries: 0, Base: 2, Max: time.Minute}), EventError, errCtx("rate_limited", 1),
			Decision{Action: Retry, Delay: 2 * time.Second, HookID: "builtin_wait_rate_limited"}},
		{"a project hook may cap rate-limit waits", Merge(nil, nil, builtin, []Hook{projectCap}, nil), EventError, errCtx("rate_limited", 3),
			Decision{Action: Fail, Code: "rate_limited", HookID: "cap_waits"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Decide(tt.hooks, tt.event, tt.ctx)
			got.Params = keepParams(got, tt.want)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Decide (-want +got):\n%s", diff)
			}
		})
	}
	got := NewDispatcher(builtin).Decide(EventLimit, limitCtx)
	require.Equal(t, "fail: spend_exceeded", got.String(), "String = %q", got)
	if got := fmt.Sprint(Decide(builtin, EventError, errCtx("transient", 1))); got != "retry in 2s" {
		t.Errorf("String = %q", got)
	}
}

// keepParams drops builtin params from got unless the case checks them.
func keepParams(got, want Decision) map[string]any {
	if want.Params == nil {
		return nil
	}
	return got.Params
}

func TestLookupAndInterpolate(t *testing.T) {
	type inner struct {
		N int `json:"n"`
	}
	ctx := map[string]any{
		"a":   map[string]any{"b": []any{"x", map[string]any{"c": 1.5}}},
		"s":   &inner{N: 4},
		"str": map[string]string{"k": "v"},
		"arr": [2]int{7, 8},
		"nil": nil,
	}
	tests := []struct {
		path string
		want any
		ok   bool
	}{
		{"a.b.0", "x", true},
		{"a.b.1.c", 1.5, true},
		{"a.b.2", nil, false},
		{"a.b.-1", nil, false},
		{"s.n", 4.0, true},
		{"str.k", "v", true},
		{"arr.1", 8, true},
		{"nil", nil, true},
		{"nil.x", nil, false},
		{"", nil, false},
		{"a.x", nil, false},
	}
	for _, tt := range tests {
		got, ok := Lookup(ctx, tt.path)
		if ok != tt.ok || !cmp.Equal(got, tt.want) {
			t.Errorf("Lookup(%q) = %v, %v; want %v, %v", tt.path, got, ok, tt.want, tt.ok)
		}
	}
	got := Interpolate("${a.b.1.c}/${s.n}/${nil}/${missing}/${str.k}", ctx)
	require.Equal(t, "1.5/4//${missing}/v", got, "Interpolate")
}
