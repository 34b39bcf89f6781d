package graph

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// An interpolation template is text with ${...} references. Inside the
// braces:
//
//	expr   = chain { "|" filter }
//	chain  = term { "||" term }
//	term   = path | "double quoted" | 'single quoted' | number
//	path   = name { "." name | "[" digits "]" }
//
// "$${" is a literal "${" (so a shell command can keep its own ${VAR}).
// A "${" with no closing brace is plain text, as in the reference.

// Filters are the interpolation filters, in the order the reference's
// interpolation library lists them.
var Filters = []string{"json", "from_json", "length", "keys", "upper", "lower"}

func knownFilter(f string) bool {
	for _, k := range Filters {
		if k == f {
			return true
		}
	}
	return false
}

// expr is one parsed ${...}.
type expr struct {
	src     string // the text between the braces
	terms   []term // the fallback chain
	filters []string
}

// term is a path or a literal of a fallback chain.
type term struct {
	path  []string // nil for a literal
	lit   any
	isLit bool
}

func (t term) String() string {
	if t.isLit {
		return fmt.Sprint(t.lit)
	}
	return strings.Join(t.path, ".")
}

// piece is a run of literal text or one reference.
type piece struct {
	text string
	ref  *expr
}

// template is a parsed string.
type template []piece

// whole reports whether the template is exactly one reference.
func (t template) whole() *expr {
	if len(t) == 1 && t[0].ref != nil {
		return t[0].ref
	}
	return nil
}

// hasRefs reports whether s may hold a reference (or an escape).
func hasRefs(s string) bool { return strings.Contains(s, "${") }

// parseTemplate splits s into text and references. The error names the
// first malformed reference.
func parseTemplate(s string) (template, error) {
	if !hasRefs(s) {
		return template{{text: s}}, nil
	}
	var out template
	var text strings.Builder
	flush := func() {
		if text.Len() > 0 {
			out = append(out, piece{text: text.String()})
			text.Reset()
		}
	}
	for i := 0; i < len(s); {
		if strings.HasPrefix(s[i:], "$${") {
			text.WriteString("${")
			i += 3
			continue
		}
		if !strings.HasPrefix(s[i:], "${") {
			text.WriteByte(s[i])
			i++
			continue
		}
		end := closingBrace(s, i+2)
		if end < 0 { // unclosed: the rest is text
			text.WriteString(s[i:])
			break
		}
		e, err := parseExpr(s[i+2 : end])
		if err != nil {
			return nil, err
		}
		flush()
		out = append(out, piece{ref: e})
		i = end + 1
	}
	flush()
	if len(out) == 0 {
		out = template{{text: ""}}
	}
	return out, nil
}

// closingBrace returns the index of the "}" that closes a reference whose
// body starts at i, skipping quoted literals; -1 when there is none.
func closingBrace(s string, i int) int {
	for ; ; i++ {
		i, _ = unquoted(s, i)
		if i == len(s) {
			return -1
		}
		if s[i] == '}' {
			return i
		}
	}
}

// unquoted returns the index of the first byte of s at or after i that
// is neither in a quoted literal ("..." with Go's backslash escapes, or
// '...' without) nor one of its quotes, len(s) when there is none; open
// reports a literal left unterminated at the end.
func unquoted(s string, i int) (next int, open bool) {
	for i < len(s) {
		q := s[i]
		if q != '"' && q != '\'' {
			return i, false
		}
		for i++; i < len(s) && s[i] != q; i++ {
			if s[i] == '\\' && q == '"' {
				i++
			}
		}
		if i >= len(s) {
			return len(s), true
		}
		i++
	}
	return len(s), false
}

// SyntaxError is a malformed ${...} reference.
type SyntaxError struct {
	Expr, Reason string
}

func (e *SyntaxError) Error() string {
	return fmt.Sprintf("${%s}: %s", e.Expr, e.Reason)
}

// parseExpr parses the body of a ${...}.
func parseExpr(src string) (*expr, error) {
	bad := func(format string, a ...any) error {
		return &SyntaxError{Expr: src, Reason: fmt.Sprintf(format, a...)}
	}
	parts, seps, err := splitBars(src)
	if err != nil {
		return nil, bad("%s", err)
	}
	e := &expr{src: src}
	i := 0
	for ; i < len(parts); i++ {
		t, err := parseTerm(parts[i])
		if err != nil {
			return nil, bad("%s", err)
		}
		e.terms = append(e.terms, t)
		if i == len(seps) || seps[i] == "|" {
			i++
			break
		}
	}
	for ; i < len(parts); i++ {
		if i-1 < len(seps) && seps[i-1] == "||" {
			return nil, bad("a fallback (||) cannot follow a filter")
		}
		f := strings.TrimSpace(parts[i])
		if f == "" {
			return nil, bad("empty filter")
		}
		if !knownFilter(f) {
			return nil, bad("unknown filter %q (known: %s)", f, strings.Join(Filters, ", "))
		}
		e.filters = append(e.filters, f)
	}
	return e, nil
}

// splitBars splits src at "||" and "|" outside quotes; seps[i] is the
// separator between parts[i] and parts[i+1].
func splitBars(src string) (parts, seps []string, err error) {
	start := 0
	for i := 0; ; i++ {
		var open bool
		if i, open = unquoted(src, i); open {
			return nil, nil, errors.New("unterminated quote")
		}
		if i == len(src) {
			break
		}
		if src[i] != '|' {
			continue
		}
		parts = append(parts, src[start:i])
		if i+1 < len(src) && src[i+1] == '|' {
			seps = append(seps, "||")
			i++
		} else {
			seps = append(seps, "|")
		}
		start = i + 1
	}
	parts = append(parts, src[start:])
	return parts, seps, nil
}

// parseTerm parses one term of a chain.
func parseTerm(s string) (term, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return term{}, errors.New("empty reference")
	}
	switch c := s[0]; {
	case c == '"':
		return doubleQuoted(s)
	case c == '\'':
		return singleQuoted(s)
	case c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9'):
		return numberLiteral(s)
	}
	p, err := parsePath(s)
	if err != nil {
		return term{}, err
	}
	return term{path: p}, nil
}

// doubleQuoted parses a "..." literal, with Go's escapes.
func doubleQuoted(s string) (term, error) {
	v, err := strconv.Unquote(s)
	if err != nil {
		return term{}, fmt.Errorf("bad string literal %s", s)
	}
	return term{lit: v, isLit: true}, nil
}

// singleQuoted parses a '...' literal, which has no escapes and so
// cannot hold a single quote.
func singleQuoted(s string) (term, error) {
	if len(s) < 2 || s[len(s)-1] != '\'' || strings.Contains(s[1:len(s)-1], "'") {
		return term{}, fmt.Errorf("bad string literal %s", s)
	}
	return term{lit: s[1 : len(s)-1], isLit: true}, nil
}

// numberLiteral parses a number literal: an int when it is written as a
// whole number that fits 64 bits, else a finite float64.
func numberLiteral(s string) (term, error) {
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return term{lit: int(n), isLit: true}, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != f || f > 1e308 || f < -1e308 {
		return term{}, fmt.Errorf("bad number %s", s)
	}
	return term{lit: f, isLit: true}, nil
}

// parsePath splits a dotted path, accepting "files[0]" as "files.0".
func parsePath(s string) ([]string, error) {
	norm, err := normalizePath(s)
	if err != nil {
		return nil, err
	}
	segs := strings.Split(norm, ".")
	for _, seg := range segs {
		if seg == "" {
			return nil, fmt.Errorf("bad path %q: empty segment", s)
		}
		for _, r := range seg {
			if !pathRune(r) {
				return nil, fmt.Errorf("bad path %q: unexpected %q", s, r)
			}
		}
	}
	return segs, nil
}

// pathRune reports whether r may appear in a path segment.
func pathRune(r rune) bool {
	return r == '_' || r == '-' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// normalizePath rewrites "a[0].b" as "a.0.b".
func normalizePath(s string) (string, error) {
	if !strings.ContainsAny(s, "[]") {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return "", fmt.Errorf("bad path %q: unclosed [", s)
			}
			idx := s[i+1 : i+j]
			if _, err := strconv.ParseUint(idx, 10, 31); err != nil {
				return "", fmt.Errorf("bad path %q: index %q is not a number", s, idx)
			}
			b.WriteByte('.')
			b.WriteString(idx)
			i += j
		case ']':
			return "", fmt.Errorf("bad path %q: unexpected ]", s)
		default:
			b.WriteByte(s[i])
		}
	}
	return b.String(), nil
}

// refsOf returns every reference in the strings inside v (a decoded YAML
// value), and the first syntax error.
func refsOf(v any) ([]*expr, error) {
	var out []*expr
	var first error
	walkStrings(v, func(s string) {
		t, err := parseTemplate(s)
		if err != nil {
			if first == nil {
				first = err
			}
			return
		}
		for _, p := range t {
			if p.ref != nil {
				out = append(out, p.ref)
			}
		}
	})
	return out, first
}

// walkStrings calls f on every string inside v (map keys excluded).
func walkStrings(v any, f func(string)) {
	switch x := v.(type) {
	case string:
		f(x)
	case map[string]any:
		for _, e := range x {
			walkStrings(e, f)
		}
	case []any:
		for _, e := range x {
			walkStrings(e, f)
		}
	}
}
