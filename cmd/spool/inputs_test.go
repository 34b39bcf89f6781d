package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/directive"
)

// --inputs-json keeps numbers as written, so the directive's types check
// them as they check --input's text.
func TestInputsJSONChecksTypesAsInputDoes(t *testing.T) {
	t.Parallel()
	in, err := decodeInputsJSON(`{"s": 12345678901234567890, "n": 1e400, "i": 3, "o": {"x": 1.5}}`)
	require.NoError(t, err)
	require.Equal(t, json.Number("12345678901234567890"), in["s"])
	d, err := directive.Parse("t.md", []byte("```xml\n<directive name=\"t\" version=\"1\"><inputs>"+
		`<input name="s" type="string"/><input name="n" type="number"/><input name="i" type="integer"/><input name="o" type="object"/>`+
		"</inputs></directive>\n```\n"))
	require.NoError(t, err)
	_, err = directive.ValidateInputs(d, in)
	require.EqualError(t, err, `input "n": want a number, got 1e400`, "as --input n=1e400 is refused")
	delete(in, "n")
	got, err := directive.ValidateInputs(d, in)
	require.NoError(t, err)
	require.Equal(t, "12345678901234567890", got["s"], "the digits written, as --input s=12345678901234567890 keeps them")
	require.Equal(t, 3, got["i"])

	for raw, want := range map[string]string{
		`{"a": 1} {"b": 2}`: "more after the object",
		`["a"]`:             "json: cannot unmarshal array into Go value of type map[string]interface {}",
		`{"a":`:             "unexpected EOF",
	} {
		_, err := decodeInputsJSON(raw)
		require.EqualError(t, err, want, raw)
	}
	in, err = decodeInputsJSON(`null`)
	require.NoError(t, err)
	require.Nil(t, in)
}
