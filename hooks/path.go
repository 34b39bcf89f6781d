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

// step takes one segment of a path from cur: the types decoded JSON and
// YAML are made of directly, anything else through reflection
// (reflectStep). ok is false when the segment is missing.
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
		i, ok := index(seg, len(c))
		if !ok {
			return nil, false
		}
		return c[i], true
	}
	return reflectStep(cur, seg)
}

// index is seg as an index into a list of n elements; ok is false when
// seg is not a decimal number from 0 to n-1.
func index(seg string, n int) (int, bool) {
	i, err := strconv.Atoi(seg)
	return i, err == nil && i >= 0 && i < n
}

// reflectStep takes one segment from a value of any other type, through
// its pointers and interfaces (a nil one ends the path): a map with
// string keys by key, a slice or an array by index, a struct through its
// JSON encoding (jsonField).
func reflectStep(cur any, seg string) (any, bool) {
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
		i, ok := index(seg, rv.Len())
		if !ok {
			return nil, false
		}
		return rv.Index(i).Interface(), true
	case reflect.Struct:
		return jsonField(rv, seg)
	}
	return nil, false
}

// jsonField reads the field seg of the struct rv as its JSON encoding
// names it, so that a path follows the names the struct is written with.
func jsonField(rv reflect.Value, seg string) (any, bool) {
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
