package provider

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"text/template"

	"github.com/spool-run/spool/thread"
)

// maxRepeat bounds what repeat makes.
const maxRepeat = 16 << 20

// scriptFuncs are the template functions of the scripted provider, on top
// of text/template's builtins.
var scriptFuncs = template.FuncMap{
	"add":  func(a, b any) (any, error) { return arith(a, b, "add", func(x, y float64) float64 { return x + y }) },
	"sub":  func(a, b any) (any, error) { return arith(a, b, "sub", func(x, y float64) float64 { return x - y }) },
	"mul":  func(a, b any) (any, error) { return arith(a, b, "mul", func(x, y float64) float64 { return x * y }) },
	"atoi": atoi,
	"toJSON": func(v any) (string, error) {
		b, err := json.Marshal(v)
		return string(b), err
	},
	"default": func(def, v any) any {
		if v == nil {
			return def
		}
		if s, ok := v.(string); ok && s == "" {
			return def
		}
		return v
	},
	"contains": func(sub, s string) bool { return strings.Contains(s, sub) },
	// repeat is s n times, at most maxRepeat bytes: a large answer or
	// tool input from a small script (a script is at most 1 MiB).
	"repeat": func(s string, n int) (string, error) {
		if n < 0 || len(s)*n > maxRepeat {
			return "", fmt.Errorf("repeat: %d × %d bytes is over the %d a script may make", n, len(s), maxRepeat)
		}
		return strings.Repeat(s, n), nil
	},
	"field": field,
	"fields": func(name string, results []any) ([]any, error) {
		out := make([]any, 0, len(results))
		for _, r := range results {
			s, _ := r.(string)
			v, err := field(name, s)
			if err != nil {
				return nil, err
			}
			if v != nil {
				out = append(out, v)
			}
		}
		return out, nil
	},
}

// field reads the top-level field name of text, a JSON object (a tool
// result); nil when text has no such field, an error when it is not a
// JSON object.
func field(name, text string) (any, error) {
	var m map[string]any
	if err := json.Unmarshal([]byte(text), &m); err != nil {
		return nil, fmt.Errorf("field %q: the tool result is not a JSON object: %.80s", name, text)
	}
	return m[name], nil
}

func arith(a, b any, name string, op func(x, y float64) float64) (any, error) {
	x, err := thread.Number(a)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	y, err := thread.Number(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	r := op(x, y)
	if r == math.Trunc(r) && math.Abs(r) < 1<<53 {
		return int(r), nil
	}
	return r, nil
}

// atoi converts a number or numeric string to an int; a fractional value is
// an error.
func atoi(v any) (int, error) {
	f, err := thread.Number(v)
	if err != nil {
		return 0, fmt.Errorf("atoi: %w", err)
	}
	if f != math.Trunc(f) || math.Abs(f) >= 1<<53 {
		return 0, fmt.Errorf("atoi: %v is not an integer", v)
	}
	return int(f), nil
}
