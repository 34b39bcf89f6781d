package graph

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func testScope() map[string]any {
	started := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	return map[string]any{
		"state": map[string]any{
			"files":       []any{map[string]any{"path": "a.go", "lines": 3}, map[string]any{"path": "b.go"}},
			"count":       2,
			"ratio":       0.5,
			"ok":          true,
			"none":        nil,
			"name":        "Spool",
			"raw":         `{"a": [1, 2.5], "b": "x"}`,
			"obj":         map[string]any{"z": 1, "a": 2},
			"html":        "<b>&</b>",
			"_last_error": map[string]any{"message": "boom"},
		},
		"inputs": map[string]any{"repo": "/src", "n": 3},
		"result": map[string]any{"files": []any{"x"}, "count": 0},
		"run":    RunScope{ID: "run-1", Graph: "g", Step: 4, StartedAt: started}.Map(),
	}
}

func TestValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   any
		want any
	}{
		{"plain text", "hello", "hello"},
		{"whole string", "${state.name}", "Spool"},
		{"whole int keeps type", "${state.count}", 2},
		{"whole float", "${state.ratio}", 0.5},
		{"whole bool", "${state.ok}", true},
		{"whole list", "${result.files}", []any{"x"}},
		{"whole object", "${state.files.0}", map[string]any{"path": "a.go", "lines": 3}},
		{"whole missing is nil", "${state.nope}", nil},
		{"whole null is nil", "${state.none}", nil},
		{"index with brackets", "${state.files[1].path}", "b.go"},
		{"index with dots", "${state.files.1.path}", "b.go"},
		{"spaces inside", "${ state.name }", "Spool"},
		{"embedded text", "repo ${inputs.repo} has ${state.count} files", "repo /src has 2 files"},
		{"embedded object as JSON", "obj=${state.obj}", `obj={"a":2,"z":1}`},
		{"embedded list as JSON", "l=${result.files}", `l=["x"]`},
		{"embedded no HTML escaping", "h=${state.html | json}", `h="<b>&</b>"`},
		{"embedded null", "n=${state.none}", "n=null"},
		{"embedded bool", "${state.ok}!", "true!"},
		{"fallback first found", "${state.nope || state.name}", "Spool"},
		{"fallback skips null", "${state.none || inputs.n}", 3},
		{"fallback string literal", `${state.nope || "dflt"}`, "dflt"},
		{"fallback single-quoted literal", `${state.nope || 'a|b}'}`, "a|b}"},
		{"fallback number literal", "${state.nope || 3}", 3},
		{"fallback float literal", "${state.nope || -1.5}", -1.5},
		{"fallback embedded", `x=${state.nope || "d"}`, "x=d"},
		{"literal never reached", `${state.name || "d"}`, "Spool"},
		{"filter json", "${state.obj | json}", `{"a":2,"z":1}`},
		{"filter json string", "${state.name | json}", `"Spool"`},
		{"filter from_json", "${state.raw | from_json}", map[string]any{"a": []any{1, 2.5}, "b": "x"}},
		{"filter from_json non-string unchanged", "${state.count | from_json}", 2},
		{"filter length list", "${state.files | length}", 2},
		{"filter length string runes", "${state.name | length}", 5},
		{"filter length object", "${state.obj | length}", 2},
		{"filter keys", "${state.obj | keys}", []any{"a", "z"}},
		{"filter keys non-object", "${state.name | keys}", []any{}},
		{"filter upper", "${state.name | upper}", "SPOOL"},
		{"filter lower", "${state.name | lower}", "spool"},
		{"filters chain", "${state.raw | from_json | keys | length}", 2},
		{"filter after fallback", "${state.nope || state.name | upper}", "SPOOL"},
		{"filter on missing stays nil", "${state.nope | length}", nil},
		{"_now", "${_now}", "2026-03-01T12:00:00Z"},
		{"_timestamp", "${_timestamp}", int64(1772366400000)},
		{"run", "${run.id}/${run.step}", "run-1/4"},
		{"idempotency key", "${run.idempotency_key}", "run-1/4"},
		{"escape", "echo $${HOME} ${inputs.repo}", "echo ${HOME} /src"},
		{"unclosed is text", "a ${state.name", "a ${state.name"},
		{"map", map[string]any{"a": "${state.count}", "b": []any{"${inputs.repo}", 1, nil}}, map[string]any{"a": 2, "b": []any{"/src", 1, nil}}},
		{"non-string literal", 42, 42},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Value(tt.in, testScope())
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestValueNoReinterpolation(t *testing.T) {
	t.Parallel()
	scope := testScope()
	scope["state"].(map[string]any)["tpl"] = "${inputs.repo}"
	got, err := Value("x ${state.tpl}", scope)
	require.NoError(t, err)
	require.Equal(t, "x ${inputs.repo}", got)
	got, err = Value("${state.tpl}", scope)
	require.NoError(t, err)
	require.Equal(t, "${inputs.repo}", got)
}

func TestValueErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, in, code, msg string
	}{
		{"missing embedded", "x ${state.nope.deep}", CodeUnresolvedReference, "state.nope.deep"},
		{"missing fallback chain", "x ${state.a || state.b}", CodeUnresolvedReference, "state.a || state.b"},
		{"index out of range", "x ${state.files.7}", CodeUnresolvedReference, "state.files.7"},
		{"no result in a gate", "x ${result.count}", CodeUnresolvedReference, "result.count"},
		{"bad from_json", "${state.name | from_json}", CodeInterpolation, "from_json"},
		{"length of a number", "${state.count | length}", CodeInterpolation, "length"},
		{"unknown filter", "${state.name | shout}", CodeInterpolation, "shout"},
		{"empty", "${}", CodeInterpolation, "empty reference"},
		{"bad path", "${state..x}", CodeInterpolation, "empty segment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			scope := testScope()
			if tt.name == "no result in a gate" {
				delete(scope, "result")
			}
			_, err := Value(tt.in, scope)
			var se *StepError
			require.True(t, errors.As(err, &se), "%v", err)
			require.Equal(t, tt.code, se.Code)
			require.Contains(t, se.Message, tt.msg)
			require.ErrorIs(t, err, &StepError{Code: tt.code})
		})
	}
}

func TestParams(t *testing.T) {
	t.Parallel()
	got, err := Params(map[string]any{
		"repo":    "${inputs.repo}",
		"missing": "${state.nope}",
		"null":    "${state.none}",
		"literal": nil,
		"nested":  map[string]any{"keep": "${state.nope}"},
		"text":    "n=${inputs.n}",
	}, testScope())
	require.NoError(t, err)
	require.Equal(t, map[string]any{
		"repo":   "/src",
		"nested": map[string]any{"keep": nil},
		"text":   "n=3",
	}, got)
	got, err = Params(nil, testScope())
	require.NoError(t, err)
	require.Equal(t, map[string]any{}, got)
	_, err = Params(map[string]any{"x": "a ${state.nope}"}, testScope())
	require.ErrorIs(t, err, &StepError{Code: CodeUnresolvedReference})
}

func TestString(t *testing.T) {
	t.Parallel()
	s, err := String("Deploy ${state.obj}?", testScope())
	require.NoError(t, err)
	require.Equal(t, `Deploy {"a":2,"z":1}?`, s)
	s, err = String("${state.count}", testScope())
	require.NoError(t, err)
	require.Equal(t, "2", s)
	s, err = String("${state.nope}", testScope())
	require.NoError(t, err)
	require.Equal(t, "", s)
}

func TestItemScope(t *testing.T) {
	t.Parallel()
	base := NewScope(map[string]any{"k": 1}, map[string]any{"i": 2}, map[string]any{"r": 3}, RunScope{ID: "r1", Step: 7})
	require.Contains(t, base, "result")
	s := ItemScope(base, "file", "a.go", 2, 5)
	require.NotContains(t, s, "result")
	got, err := Value("${file} ${loop.index}/${loop.count} ${run.idempotency_key} ${state.k}", s)
	require.NoError(t, err)
	require.Equal(t, "a.go 2/5 r1/7/2 1", got)
	require.Equal(t, "r1/7", base["run"].(map[string]any)["idempotency_key"], "the base scope is not changed")
	noResult := NewScope(nil, nil, nil, RunScope{})
	require.NotContains(t, noResult, "result")
}
