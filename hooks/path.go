package hooks

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// Lookup follows a dotted path ("cost.turns", "inputs.level", "items.0")
// into ctx. Maps with string keys are indexed by key, slices by decimal
// index; structs and other values are read through their JSON encoding, so
// a thread.Cost in the context answers "cost.turns". ok is false when any
// step is missing.
func Lookup(ctx map[string]any, path string) (any, bool) {
	if path == "" {
		return nil, false
	}
	var cur any = ctx
	for _, seg := range strings.Split(path, ".") {
		next, ok := step(cur, seg)
		if !ok {
			return nil, false
		}
		cur = next
	}
	return cur, true
}

func step(cur any, seg string) (any, bool) {
	switch c := cur.(type) {
	case nil:
		return nil, false
	case map[string]any:
		v, ok := c[seg]
		return v, ok
	case map[string]string:
		v, ok := c[seg]
		return v, ok
	case []any:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= len(c) {
			return nil, false
		}
		return c[i], true
	}
	rv := reflect.ValueOf(cur)
	for rv.Kind() == reflect.Pointer || rv.Kind() == reflect.Interface {
		if rv.IsNil() {
			return nil, false
		}
		rv = rv.Elem()
	}
	switch rv.Kind() {
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return nil, false
		}
		v := rv.MapIndex(reflect.ValueOf(seg).Convert(rv.Type().Key()))
		if !v.IsValid() {
			return nil, false
		}
		return v.Interface(), true
	case reflect.Slice, reflect.Array:
		i, err := strconv.Atoi(seg)
		if err != nil || i < 0 || i >= rv.Len() {
			return nil, false
		}
		return rv.Index(i).Interface(), true
	case reflect.Struct:
		b, err := json.Marshal(rv.Interface())
		if err != nil {
			return nil, false
		}
		var m map[string]any
		if json.Unmarshal(b, &m) != nil {
			return nil, false
		}
		v, ok := m[seg]
		return v, ok
	}
	return nil, false
}

var interpRe = regexp.MustCompile(`\$\{([A-Za-z0-9_.\-]+)\}`)

// Interpolate replaces each ${path} in s with the value at that dotted path
// in ctx (${inputs.x}, ${thread_id}, ${cost.turns}). Strings are inserted
// as they are, other values in their JSON form; a path that does not
// resolve is left as written, so a typo stays visible. Replacement is a
// single pass: inserted values are not interpolated again.
func Interpolate(s string, ctx map[string]any) string {
	if !strings.Contains(s, "${") {
		return s
	}
	return interpRe.ReplaceAllStringFunc(s, func(m string) string {
		path := m[2 : len(m)-1]
		v, ok := Lookup(ctx, path)
		if !ok {
			return m
		}
		return Format(v)
	})
}

// Format renders a context value as text: strings as they are, nil as "",
// everything else as JSON (falling back to fmt for unencodable values).
func Format(v any) string {
	switch x := v.(type) {
	case nil:
		return ""
	case string:
		return x
	case fmt.Stringer:
		return x.String()
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// InterpolateValue interpolates every string inside v (maps and slices are
// copied, other values returned as they are).
func InterpolateValue(v any, ctx map[string]any) any {
	return MapStrings(v, func(s string) string { return Interpolate(s, ctx) })
}

// MapStrings returns v, a decoded JSON value, with f applied to every
// string inside it (not to map keys): maps and slices are copied, other
// values returned as they are.
func MapStrings(v any, f func(string) string) any {
	switch x := v.(type) {
	case string:
		return f(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = MapStrings(e, f)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = MapStrings(e, f)
		}
		return out
	}
	return v
}
