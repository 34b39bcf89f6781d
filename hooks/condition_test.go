package hooks

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

func TestConditionEval(t *testing.T) {
	ctx := map[string]any{
		"directive":      "agency/api-builder",
		"classification": "rate_limited",
		"cost":           thread.Cost{Turns: 3, Spend: 0.25},
		"limits":         map[string]any{"turns": int64(10)},
		"n32":            int32(7),
		"f32":            float32(1.5),
		"jn":             json.Number("42"),
		"flag":           true,
		"tags":           []string{"a", "b"},
		"items":          []any{map[string]any{"id": "x"}},
		"meta":           map[string]any{"k": nil},
		"ids":            map[string]int{"t1": 1},
		"text_num":       "12",
	}
	leaf := func(path, op string, v any) *Condition { return &Condition{Path: path, Op: op, Value: v} }
	tests := []struct {
		name string
		c    *Condition
		want bool
	}{
		{"nil is true", nil, true},
		{"zero is true", &Condition{}, true},
		{"eq string", leaf("directive", "eq", "agency/api-builder"), true},
		{"eq string false", leaf("directive", "eq", "x"), false},
		{"eq struct field int vs yaml int", leaf("cost.turns", "eq", 3), true},
		{"eq int vs xml string", leaf("cost.turns", "eq", "3"), true},
		{"eq int64 vs float", leaf("limits.turns", "eq", 10.0), true},
		{"eq int32", leaf("n32", "eq", uint8(7)), true},
		{"eq float32", leaf("f32", "eq", "1.5"), true},
		{"eq json.Number", leaf("jn", "eq", 42), true},
		{"eq bool vs string", leaf("flag", "eq", "true"), true},
		{"eq missing", leaf("nope", "eq", nil), false},
		{"eq nil value", leaf("meta.k", "eq", nil), true},
		{"ne", leaf("classification", "ne", "transient"), true},
		{"ne same", leaf("classification", "ne", "rate_limited"), false},
		{"ne missing", leaf("nope", "ne", "x"), true},
		{"gt", leaf("cost.turns", "gt", 2), true},
		{"gt equal", leaf("cost.turns", "gt", 3), false},
		{"gte xml string", leaf("cost.turns", "gte", "1"), true},
		{"gte float", leaf("cost.spend", "gte", 0.25), true},
		{"lt", leaf("cost.spend", "lt", 0.3), true},
		{"lte", leaf("limits.turns", "lte", 9), false},
		{"gt numeric string actual", leaf("text_num", "gt", 9), true},
		{"gt strings", leaf("directive", "gt", "agency/a"), true},
		{"gt incomparable", leaf("flag", "gt", 1), false},
		{"gt missing", leaf("nope", "gt", 1), false},
		{"in list", leaf("classification", "in", []any{"transient", "rate_limited"}), true},
		{"in list miss", leaf("classification", "in", []any{"permanent"}), false},
		{"in comma string", leaf("classification", "in", "transient, rate_limited"), true},
		{"in numbers", leaf("cost.turns", "in", []any{1, 2, 3}), true},
		{"in missing", leaf("nope", "in", []any{nil}), false},
		{"contains substring", leaf("directive", "contains", "api"), true},
		{"contains substring miss", leaf("directive", "contains", "web"), false},
		{"contains list", leaf("tags", "contains", "b"), true},
		{"contains map key", leaf("meta", "contains", "k"), true},
		{"contains typed map key", leaf("ids", "contains", "t1"), true},
		{"contains typed map miss", leaf("ids", "contains", "t2"), false},
		{"regex", leaf("directive", "regex", `^agency/.*builder$`), true},
		{"regex search semantics", leaf("directive", "regex", `api`), true},
		{"regex number", leaf("cost.turns", "regex", `^3$`), true},
		{"regex miss", leaf("directive", "regex", `^web`), false},
		{"exists", leaf("meta.k", "exists", nil), true},
		{"exists missing", leaf("meta.j", "exists", nil), false},
		{"exists false", leaf("meta.j", "exists", false), true},
		{"exists slice index", leaf("items.0.id", "exists", true), true},
		{"exists bad index", leaf("items.3", "exists", true), false},
		{"any", &Condition{Any: []*Condition{leaf("directive", "eq", "x"), leaf("cost.turns", "gte", 3)}}, true},
		{"any none", &Condition{Any: []*Condition{leaf("directive", "eq", "x"), leaf("cost.turns", "gte", 30)}}, false},
		{"all", &Condition{All: []*Condition{leaf("directive", "contains", "api"), leaf("cost.turns", "gte", 3)}}, true},
		{"all one false", &Condition{All: []*Condition{leaf("directive", "contains", "api"), leaf("cost.turns", "gte", 4)}}, false},
		{"not", &Condition{Not: leaf("flag", "eq", false)}, true},
		{"not true", &Condition{Not: leaf("flag", "eq", true)}, false},
		{"leaf and combinator", &Condition{Path: "flag", Op: "eq", Value: true, Not: leaf("cost.turns", "lt", 1)}, true},
		{"nested", &Condition{All: []*Condition{{Any: []*Condition{leaf("x", "exists", nil), {Not: leaf("y", "exists", nil)}}}}}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			require.NoError(t, tt.c.Validate())
			got, err := tt.c.Eval(ctx)
			require.NoError(t, err)
			require.Equal(t, tt.want, got, "Eval")
		})
	}
}

func TestConditionValidate(t *testing.T) {
	bad := []*Condition{
		{Path: "x", Op: "like"},
		{Path: "x"},
		{Op: "eq"},
		{Path: "x", Op: "regex", Value: "(("},
		{Any: []*Condition{{Path: "x", Op: "nope"}}},
		{All: []*Condition{{Path: "x", Op: "nope"}}},
		{Not: &Condition{Path: "x", Op: "nope"}},
	}
	for _, c := range bad {
		if err := c.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want error", c)
		}
		if _, err := c.Eval(map[string]any{"x": "1"}); err == nil && c.Path != "" && c.Op != "" {
			t.Errorf("Eval(%+v) = nil error, want error", c)
		}
	}
}
