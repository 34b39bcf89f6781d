package graph

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
)

const inputsGraph = testHeader + `inputs:
  type: object
  required: [repo]
  properties:
    repo:    {type: string, description: path of the checkout}
    base:    {type: string, default: main}
    count:   {type: integer, default: 3}
    ratio:   {type: number}
    dry_run: {type: boolean, default: false}
    level:   {type: string, enum: [low, high]}
    tags:    {type: array, items: {type: integer}}
    meta:    {type: object}
    opts:
      type: object
      properties: {depth: {type: integer}}
config:
  start: a
  nodes: {a: {type: return, output: {r: "${inputs.repo}"}}}
`

func TestValidateInputs(t *testing.T) {
	t.Parallel()
	g := mustParse(t, inputsGraph)
	tests := []struct {
		name string
		in   map[string]any
		want map[string]any
		errs map[string]string // key → message part
	}{
		{"defaults", map[string]any{"repo": "/src"},
			map[string]any{"repo": "/src", "base": "main", "count": 3, "dry_run": false}, nil},
		{"coerced strings from --input", map[string]any{"repo": "/src", "count": "7", "ratio": "0.25", "dry_run": "true", "tags": "[1, 2]", "meta": `{"a": 1}`},
			map[string]any{"repo": "/src", "base": "main", "count": 7, "ratio": 0.25, "dry_run": true, "tags": []any{1, 2}, "meta": map[string]any{"a": 1}}, nil},
		{"JSON numbers", map[string]any{"repo": "/src", "count": 7.0, "ratio": 1},
			map[string]any{"repo": "/src", "base": "main", "count": 7, "ratio": 1.0, "dry_run": false}, nil},
		{"list items coerced", map[string]any{"repo": "/src", "tags": []any{"1", 2}},
			map[string]any{"repo": "/src", "base": "main", "count": 3, "dry_run": false, "tags": []any{1, 2}}, nil},
		{"enum", map[string]any{"repo": "/src", "level": "high"},
			map[string]any{"repo": "/src", "base": "main", "count": 3, "dry_run": false, "level": "high"}, nil},
		{"null is absent", map[string]any{"repo": "/src", "base": nil, "ratio": nil},
			map[string]any{"repo": "/src", "base": "main", "count": 3, "dry_run": false}, nil},
		{"free-form object", map[string]any{"repo": "/src", "meta": map[string]any{"any": []any{1}}},
			map[string]any{"repo": "/src", "base": "main", "count": 3, "dry_run": false, "meta": map[string]any{"any": []any{1}}}, nil},
		{"required", map[string]any{}, nil, map[string]string{"inputs.repo": "required"}},
		{"required null", map[string]any{"repo": nil}, nil, map[string]string{"inputs.repo": "required"}},
		{"unknown key", map[string]any{"repo": "x", "bsae": "dev"}, nil, map[string]string{"inputs.bsae": `unknown input (did you mean "base"?)`}},
		{"wrong type", map[string]any{"repo": 5}, nil, map[string]string{"inputs.repo": "must be a string, not a number"}},
		{"not an integer", map[string]any{"repo": "x", "count": "3.5"}, nil, map[string]string{"inputs.count": "not a whole number"}},
		{"not a number", map[string]any{"repo": "x", "count": "three"}, nil, map[string]string{"inputs.count": "must be an integer"}},
		{"not a boolean", map[string]any{"repo": "x", "dry_run": "yes"}, nil, map[string]string{"inputs.dry_run": "must be a boolean"}},
		{"enum refused", map[string]any{"repo": "x", "level": "mid"}, nil, map[string]string{"inputs.level": `"mid" is not one of "low", "high"`}},
		{"bad item", map[string]any{"repo": "x", "tags": []any{1, "z"}}, nil, map[string]string{"inputs.tags[1]": "must be an integer"}},
		{"nested unknown key", map[string]any{"repo": "x", "opts": map[string]any{"dept": 1}}, nil, map[string]string{"inputs.opts.dept": "unknown input"}},
		{"every problem", map[string]any{"count": "x", "zz": 1}, nil, map[string]string{"inputs.repo": "required", "inputs.count": "integer", "inputs.zz": "unknown"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := g.ValidateInputs(tt.in)
			if tt.errs != nil {
				var ie *InputsError
				require.True(t, errors.As(err, &ie), "%v", err)
				require.Len(t, ie.Problems, len(tt.errs), "%v", ie.Problems)
				for key, msg := range tt.errs {
					require.True(t, has(ie.Problems, "", key, msg), "want %q at %s, got %v", msg, key, ie.Problems)
					require.Contains(t, err.Error(), key)
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.want, got)
		})
	}
}

func TestValidateInputsDoesNotModify(t *testing.T) {
	t.Parallel()
	g := mustParse(t, inputsGraph)
	in := map[string]any{"repo": "x", "tags": []any{"1"}}
	_, err := g.ValidateInputs(in)
	require.NoError(t, err)
	require.Equal(t, map[string]any{"repo": "x", "tags": []any{"1"}}, in)
}

func TestValidateInputsWithoutSchema(t *testing.T) {
	t.Parallel()
	g := mustParse(t, withNodes("a: {type: return}"))
	require.Nil(t, g.Inputs)
	in := map[string]any{"anything": []any{1}, "n": "3"}
	got, err := g.ValidateInputs(in)
	require.NoError(t, err)
	require.Equal(t, in, got)
	got, err = g.ValidateInputs(nil)
	require.NoError(t, err)
	require.Equal(t, map[string]any{}, got)
}

func TestValidateInputsEmptySchema(t *testing.T) {
	t.Parallel()
	g := mustParse(t, testHeader+"inputs: {type: object}\nconfig: {start: a, nodes: {a: {type: return}}}\n")
	_, err := g.ValidateInputs(map[string]any{"x": 1})
	require.ErrorContains(t, err, "inputs.x: unknown input")
	got, err := g.ValidateInputs(nil)
	require.NoError(t, err)
	require.Equal(t, map[string]any{}, got)

	open := mustParse(t, testHeader+"inputs: {type: object, additionalProperties: true, properties: {n: {type: integer}}}\nconfig: {start: a, nodes: {a: {type: return}}}\n")
	got, err = open.ValidateInputs(map[string]any{"x": 1, "n": "2"})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"x": 1, "n": 2}, got)
}

func TestParseSchemaErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   any
		msg  string
	}{
		{"not a mapping", []any{1}, "must be a mapping"},
		{"not an object", map[string]any{"type": "string"}, "must be an object"},
		{"bad type", map[string]any{"properties": map[string]any{"a": map[string]any{"type": "str"}}}, "properties.a.type"},
		{"bad default", map[string]any{"properties": map[string]any{"a": map[string]any{"type": "integer", "default": "x"}}}, "properties.a.default"},
		{"bad enum entry", map[string]any{"properties": map[string]any{"a": map[string]any{"type": "integer", "enum": []any{1, "b"}}}}, "properties.a.enum[1]"},
		{"required undeclared", map[string]any{"required": []any{"a"}}, `"a" is required but not a declared property`},
		{"items without array", map[string]any{"properties": map[string]any{"a": map[string]any{"type": "string", "items": map[string]any{}}}}, "items needs type array"},
		{"additionalProperties schema", map[string]any{"additionalProperties": map[string]any{}}, "must be true or false"},
		{"unknown keyword", map[string]any{"propertys": map[string]any{}}, "did you mean `properties`"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ParseSchema(tt.in)
			require.ErrorContains(t, err, tt.msg)
		})
	}
	s, err := ParseSchema(map[string]any{"title": "x", "properties": map[string]any{"a": map[string]any{"format": "uri", "type": "string"}}})
	require.NoError(t, err, "annotations are accepted")
	require.Equal(t, "object", s.Type)
}
