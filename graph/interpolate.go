package graph

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/spool-run/spool/hooks"
)

// Scope namespaces (section 7).
const (
	ScopeState     = "state"
	ScopeInputs    = "inputs"
	ScopeResult    = "result"
	ScopeRun       = "run"
	ScopeLoop      = "loop"
	ScopeNow       = "_now"       // run.started_at as RFC 3339
	ScopeTimestamp = "_timestamp" // run.started_at as Unix milliseconds
)

// reservedNames may not be a foreach's `as`.
var reservedNames = []string{ScopeState, ScopeInputs, ScopeResult, ScopeRun, ScopeLoop, ScopeNow, ScopeTimestamp}

// Value interpolates v against scope. Maps and lists are copied with their
// strings interpolated; other values are returned as they are. A string
// that is exactly one ${...} becomes the referenced value with its JSON
// type (nil when nothing resolves; the value is not copied, so callers
// that keep it must not modify scope). References embedded in text are
// inserted once, strings as they are and other values as compact JSON,
// and a missing one fails with a *StepError whose Code is
// CodeUnresolvedReference.
func Value(v any, scope map[string]any) (any, error) {
	switch x := v.(type) {
	case string:
		return interpolateString(x, scope)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			r, err := Value(e, scope)
			if err != nil {
				return nil, err
			}
			out[k] = r
		}
		return out, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			r, err := Value(e, scope)
			if err != nil {
				return nil, err
			}
			out[i] = r
		}
		return out, nil
	}
	return v, nil
}

// Params is Value for tool params and directive or graph inputs: keys
// whose value resolved to null are dropped, so the callee's defaults apply.
// A nil map gives an empty map.
func Params(m map[string]any, scope map[string]any) (map[string]any, error) {
	out := make(map[string]any, len(m))
	for k, e := range m {
		r, err := Value(e, scope)
		if err != nil {
			return nil, err
		}
		if r != nil {
			out[k] = r
		}
	}
	return out, nil
}

// String interpolates s and returns it as text (a whole reference to a
// non-string becomes compact JSON, and to nothing the empty string). It is
// for prompts and other fields that are always text.
func String(s string, scope map[string]any) (string, error) {
	v, err := interpolateString(s, scope)
	if err != nil {
		return "", err
	}
	if v == nil {
		return "", nil
	}
	return text(v), nil
}

func interpolateString(s string, scope map[string]any) (any, error) {
	if !hasRefs(s) {
		return s, nil
	}
	t, err := parseTemplate(s)
	if err != nil {
		return nil, &StepError{Code: CodeInterpolation, Message: err.Error()}
	}
	if e := t.whole(); e != nil {
		v, _, err := e.eval(scope)
		return v, err
	}
	var b strings.Builder
	for _, p := range t {
		if p.ref == nil {
			b.WriteString(p.text)
			continue
		}
		v, found, err := p.ref.eval(scope)
		if err != nil {
			return nil, err
		}
		if !found {
			return nil, &StepError{Code: CodeUnresolvedReference,
				Message: fmt.Sprintf("${%s}: %s does not resolve", p.ref.src, p.ref.paths())}
		}
		b.WriteString(text(v))
	}
	return b.String(), nil
}

// paths names the expression's paths for an error message.
func (e *expr) paths() string {
	var ps []string
	for _, t := range e.terms {
		if !t.isLit {
			ps = append(ps, strings.Join(t.path, "."))
		}
	}
	return strings.Join(ps, " || ")
}

// eval resolves the fallback chain and applies the filters. found is false
// when no term resolved at all (a path that holds null resolves).
func (e *expr) eval(scope map[string]any) (v any, found bool, err error) {
	for _, t := range e.terms {
		var x any
		ok := true
		if t.isLit {
			x = t.lit
		} else {
			x, ok = lookup(scope, t.path)
		}
		if ok {
			found = true
		}
		if ok && x != nil {
			v = x
			break
		}
	}
	if v == nil {
		return nil, found, nil
	}
	for _, f := range e.filters {
		if v, err = applyFilter(f, v); err != nil {
			return nil, true, &StepError{Code: CodeInterpolation, Message: fmt.Sprintf("${%s}: %v", e.src, err)}
		}
	}
	return v, true, nil
}

// lookup resolves a path in scope; _now and _timestamp derive from
// run.started_at unless scope holds them.
func lookup(scope map[string]any, path []string) (any, bool) {
	if len(path) == 0 {
		return nil, false
	}
	if _, ok := scope[path[0]]; !ok && len(path) == 1 && (path[0] == ScopeNow || path[0] == ScopeTimestamp) {
		at, ok := startedAt(scope)
		if !ok {
			return nil, false
		}
		if path[0] == ScopeNow {
			return at.UTC().Format(time.RFC3339Nano), true
		}
		return at.UnixMilli(), true
	}
	return hooks.Lookup(scope, strings.Join(path, "."))
}

// startedAt reads run.started_at (a time.Time or RFC 3339 text).
func startedAt(scope map[string]any) (time.Time, bool) {
	v, ok := hooks.Lookup(scope, "run.started_at")
	if !ok {
		return time.Time{}, false
	}
	switch x := v.(type) {
	case time.Time:
		return x, true
	case string:
		t, err := time.Parse(time.RFC3339Nano, x)
		return t, err == nil
	}
	return time.Time{}, false
}

// text renders a value inserted into text: strings as they are, anything
// else as compact JSON.
func text(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := compactJSON(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// compactJSON encodes v without HTML escaping and without a newline.
func compactJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// applyFilter applies one filter to a non-nil value.
func applyFilter(f string, v any) (any, error) {
	if apply := filterFuncs[f]; apply != nil {
		return apply(v)
	}
	return nil, fmt.Errorf("unknown filter %q", f)
}

// filterFuncs implement the filters of Filters, each on a non-nil value.
var filterFuncs = map[string]func(v any) (any, error){
	"json":      jsonFilter,
	"from_json": fromJSONFilter,
	"length":    lengthFilter,
	"keys":      keysFilter,
	"upper":     func(v any) (any, error) { return strings.ToUpper(text(v)), nil },
	"lower":     func(v any) (any, error) { return strings.ToLower(text(v)), nil },
}

// jsonFilter writes v as compact JSON text.
func jsonFilter(v any) (any, error) {
	b, err := compactJSON(v)
	if err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	return string(b), nil
}

// fromJSONFilter decodes JSON text; a value that is not text is already
// decoded and passes unchanged.
func fromJSONFilter(v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		return v, nil
	}
	out, err := decodeJSON([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("from_json: %w", err)
	}
	return out, nil
}

// lengthFilter counts a text's characters (runes), a list's elements or
// an object's keys; anything else has no length.
func lengthFilter(v any) (any, error) {
	if s, ok := v.(string); ok {
		return utf8.RuneCountInString(s), nil
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array, reflect.Map:
		return rv.Len(), nil
	}
	return nil, fmt.Errorf("length: %T has no length", v)
}

// keysFilter returns an object's keys sorted, and an empty list for
// anything that is not an object.
func keysFilter(v any) (any, error) {
	keys := []any{}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Map || rv.Type().Key().Kind() != reflect.String {
		return keys, nil
	}
	ks := make([]string, 0, rv.Len())
	for _, k := range rv.MapKeys() {
		ks = append(ks, k.String())
	}
	sort.Strings(ks)
	for _, k := range ks {
		keys = append(keys, k)
	}
	return keys, nil
}

// decodeJSON decodes one JSON value; integers that fit an int stay
// integers, other numbers are float64.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid text after the JSON value")
	}
	return fromNumbers(v)
}

// jsonNumber is a decoded JSON number: an int when it is written whole
// and fits, else a float64; one beyond float64's range is an error.
func jsonNumber(x json.Number) (any, error) {
	if i, err := x.Int64(); err == nil && int64(int(i)) == i {
		return int(i), nil
	}
	f, err := x.Float64()
	if err != nil {
		return nil, fmt.Errorf("number %s is out of range", x)
	}
	return f, nil
}

// fromNumbers replaces the json.Number values inside v.
func fromNumbers(v any) (any, error) {
	var err error
	switch x := v.(type) {
	case json.Number:
		return jsonNumber(x)
	case map[string]any:
		for k, e := range x {
			if x[k], err = fromNumbers(e); err != nil {
				return nil, err
			}
		}
	case []any:
		for i, e := range x {
			if x[i], err = fromNumbers(e); err != nil {
				return nil, err
			}
		}
	}
	return v, nil
}
