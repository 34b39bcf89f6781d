package directive

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/stretchr/testify/require"
)

func TestValidateInputs(t *testing.T) {
	d := parseFile(t, "implement_dashboard.md")
	tests := []struct {
		name    string
		in      map[string]any
		want    map[string]any
		wantErr string
	}{
		{"defaults applied and coerced", map[string]any{"api_thread_id": "api-1"},
			map[string]any{"api_thread_id": "api-1", "views": 5, "dark": false}, ""},
		{"cli strings coerced", map[string]any{"api_thread_id": "api-1", "views": "7", "ratio": "0.5", "dark": "TRUE", "options": `{"a":1}`, "pages": `["x","y"]`},
			map[string]any{"api_thread_id": "api-1", "views": 7, "ratio": 0.5, "dark": true, "options": map[string]any{"a": 1.0}, "pages": []any{"x", "y"}}, ""},
		{"json numbers", map[string]any{"api_thread_id": "api-1", "views": 3.0, "ratio": 2},
			map[string]any{"api_thread_id": "api-1", "views": 3, "ratio": 2.0, "dark": false}, ""},
		{"typed slices and maps", map[string]any{"api_thread_id": "a", "pages": []string{"p"}, "options": map[string]int{"k": 1}},
			map[string]any{"api_thread_id": "a", "views": 5, "dark": false, "pages": []any{"p"}, "options": map[string]any{"k": 1.0}}, ""},
		{"number written to string input", map[string]any{"api_thread_id": 42},
			map[string]any{"api_thread_id": "42", "views": 5, "dark": false}, ""},
		{"undeclared refused", map[string]any{"api_thread_id": "a", "extra": []int{1}}, nil,
			`input "extra" is not declared (declared: api_thread_id, previous_summary_id, views, ratio, dark, options, pages)`},
		{"misspelt required", map[string]any{"api_thead_id": "a", "veiws": 2}, nil, `inputs "api_thead_id", "veiws" are not declared (declared: api_thread_id,`},
		{"missing required", map[string]any{"views": 1}, nil, `input "api_thread_id": required input missing`},
		{"nil required", map[string]any{"api_thread_id": nil}, nil, `input "api_thread_id": required input missing`},
		{"integer with fraction", map[string]any{"api_thread_id": "a", "views": 2.5}, nil, `input "views": want an integer, got 2.5`},
		{"integer from text", map[string]any{"api_thread_id": "a", "views": "seven"}, nil, `input "views": want an integer, got "seven"`},
		{"number from text", map[string]any{"api_thread_id": "a", "ratio": "wide"}, nil, `input "ratio": want a number, got "wide"`},
		{"boolean", map[string]any{"api_thread_id": "a", "dark": "maybe"}, nil, `input "dark": want a boolean, got "maybe"`},
		{"object", map[string]any{"api_thread_id": "a", "options": []any{1}}, nil, `input "options": want an object, got an array`},
		{"object bad json", map[string]any{"api_thread_id": "a", "options": "{"}, nil, `input "options": want an object`},
		{"array", map[string]any{"api_thread_id": "a", "pages": "x"}, nil, `input "pages": want an array, got "x"`},
		{"string from object", map[string]any{"api_thread_id": map[string]any{}}, nil, `input "api_thread_id": want a string, got an object`},
		// --inputs-json keeps numbers as written (json.Number): checked as
		// --input's text is.
		{"json number as written", map[string]any{"api_thread_id": json.Number("12345678901234567890"), "views": json.Number("4"), "ratio": json.Number("0.25")},
			map[string]any{"api_thread_id": "12345678901234567890", "views": 4, "ratio": 0.25, "dark": false}, ""},
		{"json number out of range", map[string]any{"api_thread_id": "a", "ratio": json.Number("1e400")}, nil, `input "ratio": want a number, got 1e400`},
		{"json number with fraction", map[string]any{"api_thread_id": "a", "views": json.Number("2.5")}, nil, `input "views": want an integer, got 2.5`},
		{"json number for a boolean", map[string]any{"api_thread_id": "a", "dark": json.Number("1e400")}, nil, `input "dark": want a boolean, got a number`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ValidateInputs(d, tt.in)
			if tt.wantErr != "" {
				require.Error(t, err, "err = %v, want %q", err, tt.wantErr)
				require.Contains(t, err.Error(), tt.wantErr, "err = %v, want %q", err, tt.wantErr)
				require.ErrorIs(t, err, ErrInvalidInput, "err does not wrap ErrInvalidInput")
				return
			}
			require.NoError(t, err)
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	// A directive that declares no inputs takes any.
	free, err := Parse("free.md", []byte(wrap("")))
	require.NoError(t, err)
	if got, err := ValidateInputs(free, map[string]any{"name": "ada"}); err != nil || got["name"] != "ada" {
		t.Errorf("no declared inputs: got %v, %v", got, err)
	}
	// The error says what is wrong and what is declared, not which
	// directive: its caller says that.
	_, err = ValidateInputs(d, map[string]any{"nmae": "x"})
	var ie *InputError
	require.ErrorAs(t, err, &ie, "undeclared input error")
	require.True(t, ie.Undeclared, "undeclared input error: %#v", err)
	require.Equal(t, "nmae", ie.Inputs[0], "undeclared input error: %#v", err)
	require.Len(t, ie.Declared, 7, "undeclared input error: %#v", err)
	require.NotContains(t, err.Error(), "implement_dashboard", "undeclared input error: %#v", err)
	// the caller's map is not modified
	in := map[string]any{"api_thread_id": "a", "views": "2"}
	if _, err := ValidateInputs(d, in); err != nil || in["views"] != "2" || len(in) != 2 {
		t.Errorf("input map modified: %v %v", in, err)
	}
}

func TestRenderBody(t *testing.T) {
	d := parseFile(t, "depth_child.md")
	got := RenderBody(d, map[string]any{"level": "2"})
	require.Contains(t, got, `value="depth_child_2.txt"`, "rendered body")
	require.Contains(t, got, `value="level 2"`, "rendered body")
	require.NotContains(t, got, "{input:", "rendered body")
	require.NotContains(t, got, "rye:signed", "signature line in rendered body")

	d2, err := Parse("x.md", []byte("Hi {input:who} {input:n} {input:opt} {input:undeclared} {input:d}\n"+wrap(`<inputs><input name="who"/><input name="n" type="integer"/><input name="opt"/><input name="d" default="dflt"/></inputs>`)))
	require.NoError(t, err)
	got = RenderBody(d2, map[string]any{"who": "{input:n}", "n": 3})
	want := "Hi {input:n} 3  {input:undeclared} dflt\n"
	require.True(t, strings.HasPrefix(got, want), "got %q, want prefix %q", got, want)
}

func TestInterpolate(t *testing.T) {
	ctx := map[string]any{
		"thread_id": "t-1",
		"inputs":    map[string]any{"api_thread_id": "api/1", "n": 3, "obj": map[string]any{"k": "v"}},
		"cost":      map[string]any{"turns": 2},
	}
	tests := map[string]string{
		"agent/threads/${inputs.api_thread_id}": "agent/threads/api/1",
		"${thread_id}:${cost.turns}":            "t-1:2",
		"${inputs.n}${inputs.obj}":              `3{"k":"v"}`,
		"${inputs.missing} and ${nope}":         "${inputs.missing} and ${nope}",
		"no refs":                               "no refs",
		"${inputs.obj.k}":                       "v",
	}
	for in, want := range tests {
		if got := Interpolate(in, ctx); got != want {
			t.Errorf("Interpolate(%q) = %q, want %q", in, got, want)
		}
	}
}
