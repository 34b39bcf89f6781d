package directive

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/spool-run/spool/hooks"
	"github.com/spool-run/spool/thread"
)

// ErrInvalidInput is wrapped by every ValidateInputs error.
var ErrInvalidInput = errors.New("invalid input")

// InputError is a ValidateInputs error: the input it is about, what is
// wrong with it, and the inputs the directive declares. It wraps
// ErrInvalidInput. Its message does not name the directive: the caller
// that chose the directive says which (`directive demo/hello: input
// "nmae" is not declared (declared: name)`).
type InputError struct {
	Inputs   []string // the inputs it is about, sorted
	Problem  string   // "required input missing", "want an integer, got \"x\"", ...
	Declared []string // the directive's inputs, in declaration order
	// Undeclared: Inputs are not among Declared.
	Undeclared bool
}

func (e *InputError) Error() string {
	if e.Undeclared {
		what := "input " + quoteList(e.Inputs) + " is"
		if len(e.Inputs) > 1 {
			what = "inputs " + quoteList(e.Inputs) + " are"
		}
		return fmt.Sprintf("%s not declared (declared: %s)", what, strings.Join(e.Declared, ", "))
	}
	return fmt.Sprintf("input %s: %s", quoteList(e.Inputs), e.Problem)
}

func (e *InputError) Unwrap() error { return ErrInvalidInput }

func quoteList(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = strconv.Quote(n)
	}
	return strings.Join(q, ", ")
}

// ValidateInputs checks inputs against d's declarations and returns a new
// map with defaults applied and values coerced to their declared type:
//
//   - an input the directive does not declare is an error, when it
//     declares any (a directive without an <inputs> block takes any
//     inputs, for its templates and scripts to read);
//   - a required input that is missing (or nil) is an error;
//   - a missing optional input with default="..." gets the default,
//     coerced like a given value;
//   - string: any string; numbers and booleans are accepted and written
//     as text;
//   - integer: Go integers, integral floats (JSON 3.0) and decimal strings
//     ("3", as --input k=v gives) → int;
//   - number: any Go number or numeric string → float64;
//   - boolean: bool or "true"/"false" (any case) → bool;
//   - object / array: a map / slice, or a string holding JSON of that
//     shape → map[string]any / []any.
//
// The first problem is returned as an *InputError.
func ValidateInputs(d *Directive, inputs map[string]any) (map[string]any, error) {
	declared := make([]string, len(d.Inputs))
	for i, in := range d.Inputs {
		declared[i] = in.Name
	}
	if len(d.Inputs) > 0 {
		var unknown []string
		for k := range inputs {
			if !slices.Contains(declared, k) {
				unknown = append(unknown, k)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return nil, &InputError{Inputs: unknown, Declared: declared, Undeclared: true}
		}
	}
	out := make(map[string]any, len(inputs)+len(d.Inputs))
	for k, v := range inputs {
		out[k] = v
	}
	for _, in := range d.Inputs {
		v, ok := out[in.Name]
		if !ok || v == nil {
			switch {
			case in.Default != nil:
				v = *in.Default
			case in.Required:
				return nil, &InputError{Inputs: []string{in.Name}, Problem: "required input missing", Declared: declared}
			default:
				delete(out, in.Name)
				continue
			}
		}
		cv, err := coerce(in.Type, v)
		if err != nil {
			return nil, &InputError{Inputs: []string{in.Name}, Problem: err.Error(), Declared: declared}
		}
		out[in.Name] = cv
	}
	return out, nil
}

// coerce converts v to the declared input type typ, by the rules of
// ValidateInputs; its error says what was wanted and what was given.
func coerce(typ string, v any) (any, error) {
	switch typ {
	case TypeString, "":
		return coerceString(v)
	case TypeInteger:
		return coerceInteger(v)
	case TypeNumber:
		return coerceNumber(v)
	case TypeBoolean:
		return coerceBoolean(v)
	case TypeObject:
		return coerceObject(v)
	case TypeArray:
		return coerceArray(v)
	}
	return nil, fmt.Errorf("unknown type %q", typ)
}

// coerceString takes a string as it is, and a number or a boolean as its
// text.
func coerceString(v any) (any, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64, json.Number:
		return hooks.Format(x), nil
	}
	return nil, fmt.Errorf("want a string, got %s", describe(v))
}

// coerceInteger takes a number that is integral (and exact as a float64)
// as an int, a number written as text too.
func coerceInteger(v any) (any, error) {
	if x, ok := v.(int); ok {
		return x, nil
	}
	f, err := thread.Number(v)
	switch {
	case err != nil && !isText(v):
		return nil, fmt.Errorf("want an integer, got %s", describe(v))
	case err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53:
		return nil, fmt.Errorf("want an integer, got %s", literal(v))
	}
	return int(f), nil
}

// coerceNumber takes any number as a float64, a number written as text
// too.
func coerceNumber(v any) (any, error) {
	f, err := thread.Number(v)
	switch {
	case err != nil && !isText(v):
		return nil, fmt.Errorf("want a number, got %s", describe(v))
	case err != nil:
		return nil, fmt.Errorf("want a number, got %s", literal(v))
	}
	return f, nil
}

// coerceBoolean takes a boolean, or its text in any case.
func coerceBoolean(v any) (any, error) {
	if b, ok := thread.Bool(v); ok {
		return b, nil
	}
	if x, ok := v.(string); ok {
		return nil, fmt.Errorf("want a boolean, got %q", x)
	}
	return nil, fmt.Errorf("want a boolean, got %s", describe(v))
}

// coerceObject takes a map[string]any as it is, a string holding a JSON
// object, and any other value its JSON encoding decodes to an object (a
// typed map, a struct).
func coerceObject(v any) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		return x, nil
	case string:
		var m map[string]any
		if err := json.Unmarshal([]byte(x), &m); err != nil || m == nil {
			return nil, fmt.Errorf("want an object, got %q", x)
		}
		return m, nil
	}
	if m, ok := viaJSON[map[string]any](v); ok {
		return m, nil
	}
	return nil, fmt.Errorf("want an object, got %s", describe(v))
}

// coerceArray takes a []any as it is, a string holding a JSON array, and
// any other value whose JSON encoding is an array (a typed slice, not a
// nil one).
func coerceArray(v any) (any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case string:
		var a []any
		if err := json.Unmarshal([]byte(x), &a); err != nil || a == nil {
			return nil, fmt.Errorf("want an array, got %q", x)
		}
		return a, nil
	}
	if a, ok := viaJSON[[]any](v); ok && a != nil {
		return a, nil
	}
	return nil, fmt.Errorf("want an array, got %s", describe(v))
}

// viaJSON converts typed maps and slices ([]string, map[string]int) to
// their generic form; strings and scalars are not converted.
func viaJSON[T any](v any) (T, bool) {
	var out T
	switch v.(type) {
	case string, bool, nil:
		return out, false
	}
	b, err := json.Marshal(v)
	if err != nil {
		return out, false
	}
	if json.Unmarshal(b, &out) != nil {
		return out, false
	}
	return out, true
}

func isString(v any) bool {
	_, ok := v.(string)
	return ok
}

// isText reports whether v is text a number may be written in: a string
// (--input's), or a JSON number kept as written (--inputs-json's).
func isText(v any) bool {
	_, num := v.(json.Number)
	return num || isString(v)
}

// literal is v as an error message quotes it: a string quoted, anything
// else as fmt prints it.
func literal(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

func describe(v any) string {
	switch v.(type) {
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	case string:
		return "a string"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	}
	if _, err := thread.Number(v); err == nil {
		return "a number"
	}
	return fmt.Sprintf("%T", v)
}

var inputRe = regexp.MustCompile(`\{input:([A-Za-z0-9_.\-]+)\}`)

// RenderBody returns d's prompt with each {input:name} replaced by the
// input's value (strings as they are, other values as JSON). A declared
// input that was not supplied renders as its default, else as ""; a
// placeholder naming an undeclared, unsupplied input is left as written.
// Replacement is a single pass.
func RenderBody(d *Directive, inputs map[string]any) string {
	return render(d, d.Prompt, inputs)
}

func render(d *Directive, text string, inputs map[string]any) string {
	return inputRe.ReplaceAllStringFunc(text, func(m string) string {
		name := m[len("{input:") : len(m)-1]
		if v, ok := inputs[name]; ok {
			return hooks.Format(v)
		}
		if in, ok := d.Input(name); ok {
			if in.Default != nil {
				return *in.Default
			}
			return ""
		}
		return m
	})
}

// Interpolate replaces ${path} references with values from ctx
// (${inputs.x}, ${thread_id}, dotted paths into maps); unresolved
// references stay as written. It is hooks.Interpolate.
func Interpolate(s string, ctx map[string]any) string {
	return hooks.Interpolate(s, ctx)
}

// InputNames returns the declared input names, sorted.
func (d *Directive) InputNames() []string {
	out := make([]string, 0, len(d.Inputs))
	for _, in := range d.Inputs {
		out = append(out, in.Name)
	}
	sort.Strings(out)
	return out
}
