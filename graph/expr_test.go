package graph

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQuotedLiterals: the end of a reference ("}") and its separators
// ("|", "||") are found only outside quoted literals, a "..." literal
// taking Go's backslash escapes and a '...' literal none, in both
// scanners that read a reference (closingBrace and splitBars).
func TestQuotedLiterals(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		body  string // a reference's body and what follows it
		brace int    // closingBrace from 0
		parts []string
		seps  []string
		err   string
	}{
		{body: "a}", brace: 1, parts: []string{"a}"}},
		{body: "a", brace: -1, parts: []string{"a"}},
		{body: "", brace: -1, parts: []string{""}},
		{body: `'}'}`, brace: 3, parts: []string{`'}'}`}},
		{body: `"}"}`, brace: 3, parts: []string{`"}"}`}},
		{body: `"\"}"}`, brace: 5, parts: []string{`"\"}"}`}},
		{body: `'\'}`, brace: 3, parts: []string{`'\'}`}},
		{body: `"\\"}`, brace: 4, parts: []string{`"\\"}`}},
		{body: `a || 'b|c' | upper`, brace: -1, parts: []string{"a ", " 'b|c' ", " upper"}, seps: []string{"||", "|"}},
		{body: `a || "b||\"|" || c`, brace: -1, parts: []string{"a ", ` "b||\"|" `, " c"}, seps: []string{"||", "||"}},
		{body: `a|||b`, brace: -1, parts: []string{"a", "", "b"}, seps: []string{"||", "|"}},
		{body: `'a`, brace: -1, err: "unterminated quote"},
		{body: `"a\"`, brace: -1, err: "unterminated quote"},
		{body: `"a\`, brace: -1, err: "unterminated quote"},
		{body: `a || "b`, brace: -1, err: "unterminated quote"},
	} {
		require.Equal(t, c.brace, closingBrace(c.body, 0), "closingBrace(%q)", c.body)
		parts, seps, err := splitBars(c.body)
		if c.err != "" {
			require.EqualError(t, err, c.err, "splitBars(%q)", c.body)
			continue
		}
		require.NoError(t, err, "splitBars(%q)", c.body)
		require.Equal(t, c.parts, parts, "splitBars(%q)", c.body)
		require.Equal(t, c.seps, seps, "splitBars(%q)", c.body)
	}
}
