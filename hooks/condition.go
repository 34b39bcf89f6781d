package hooks

import (
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/spool-run/spool/thread"
)

// Condition operators.
const (
	OpEq       = "eq"
	OpNe       = "ne"
	OpGt       = "gt"
	OpGte      = "gte"
	OpLt       = "lt"
	OpLte      = "lte"
	OpIn       = "in"
	OpContains = "contains"
	OpRegex    = "regex"
	OpExists   = "exists"
)

// Condition is a predicate over an event context: either a leaf (Path, Op,
// Value) or a combinator (Any, All, Not). A condition with both is the
// conjunction of all its parts. The zero Condition is true.
//
// Leaf semantics (actual is the value at Path):
//   - eq, ne: numbers compare numerically whatever their Go type (and a
//     numeric string such as an XML attribute value="1" equals the number
//     1); booleans compare with "true"/"false"; anything else compares by
//     its text form. A missing path is unequal to everything.
//   - gt, gte, lt, lte: numeric when both sides are numbers or numeric
//     strings, otherwise string order; false when the path is missing.
//   - in: actual is an element of Value (a list; a string Value is a
//     comma-separated list, as XML attributes cannot hold lists).
//   - contains: actual (a string) contains Value (substring), or actual (a
//     list) has an element equal to Value, or actual (a map) has key Value.
//   - regex: Value is an RE2 pattern found anywhere in actual's text form.
//   - exists: the path resolves (to anything, even null); with Value
//     false, the path does not resolve.
type Condition struct {
	Path  string       `yaml:"path,omitempty"`
	Op    string       `yaml:"op,omitempty"`
	Value any          `yaml:"value,omitempty"`
	Any   []*Condition `yaml:"any,omitempty"`
	All   []*Condition `yaml:"all,omitempty"`
	Not   *Condition   `yaml:"not,omitempty"`
}

// Validate checks operators and regular expressions.
func (c *Condition) Validate() error {
	if c == nil {
		return nil
	}
	if c.Path != "" || c.Op != "" {
		switch c.Op {
		case OpEq, OpNe, OpGt, OpGte, OpLt, OpLte, OpIn, OpContains, OpExists:
		case OpRegex:
			if _, err := compileRegex(Format(c.Value)); err != nil {
				return fmt.Errorf("%s regex %q: %w", c.Path, Format(c.Value), err)
			}
		case "":
			return fmt.Errorf("path %q: missing op", c.Path)
		default:
			return fmt.Errorf("path %q: unknown op %q", c.Path, c.Op)
		}
		if c.Path == "" {
			return fmt.Errorf("op %s: missing path", c.Op)
		}
	}
	for _, s := range c.Any {
		if err := s.Validate(); err != nil {
			return err
		}
	}
	for _, s := range c.All {
		if err := s.Validate(); err != nil {
			return err
		}
	}
	return c.Not.Validate()
}

// Eval evaluates the condition against ctx. A nil condition is true. An
// invalid condition (unknown op, bad regex) is false with an error.
func (c *Condition) Eval(ctx map[string]any) (bool, error) {
	if c == nil {
		return true, nil
	}
	if c.Path != "" || c.Op != "" {
		ok, err := c.leaf(ctx)
		if err != nil || !ok {
			return false, err
		}
	}
	if len(c.Any) > 0 {
		ok, err := anyHolds(c.Any, ctx)
		if err != nil || !ok {
			return false, err
		}
	}
	for _, s := range c.All {
		ok, err := s.Eval(ctx)
		if err != nil || !ok {
			return false, err
		}
	}
	if c.Not != nil {
		ok, err := c.Not.Eval(ctx)
		if err != nil {
			return false, err
		}
		if ok {
			return false, nil
		}
	}
	return true, nil
}

// anyHolds reports whether one of cs holds against ctx, evaluating them
// in order up to the first that does (or the first error).
func anyHolds(cs []*Condition, ctx map[string]any) (bool, error) {
	for _, s := range cs {
		ok, err := s.Eval(ctx)
		if err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
	}
	return false, nil
}

// leaf evaluates the leaf part of c (Path, Op, Value) against ctx, with
// the semantics of each operator given on Condition.
func (c *Condition) leaf(ctx map[string]any) (bool, error) {
	actual, found := Lookup(ctx, c.Path)
	switch c.Op {
	case OpExists:
		return found == c.wantExists(), nil
	case OpEq:
		return found && equal(actual, c.Value), nil
	case OpNe:
		return !found || !equal(actual, c.Value), nil
	case OpGt, OpGte, OpLt, OpLte:
		return found && ordered(c.Op, actual, c.Value), nil
	case OpIn:
		return found && oneOf(actual, c.Value), nil
	case OpContains:
		return found && contains(actual, c.Value), nil
	case OpRegex:
		return c.matches(actual, found)
	}
	return false, fmt.Errorf("condition %s: unknown op %q", c.Path, c.Op)
}

// wantExists says whether an exists condition wants its path to resolve:
// yes, unless its Value is false.
func (c *Condition) wantExists() bool {
	if b, ok := thread.Bool(c.Value); ok && c.Value != nil {
		return b
	}
	return true
}

// ordered reports whether actual stands to want as op (gt, gte, lt or
// lte) says, in compare's order; two values compare cannot order are not.
func ordered(op string, actual, want any) bool {
	cmp, ok := compare(actual, want)
	if !ok {
		return false
	}
	switch op {
	case OpGt:
		return cmp > 0
	case OpGte:
		return cmp >= 0
	case OpLt:
		return cmp < 0
	default:
		return cmp <= 0
	}
}

// oneOf reports whether actual equals an element of list (see listOf: a
// string is a comma-separated list).
func oneOf(actual, list any) bool {
	for _, e := range listOf(list, true) {
		if equal(actual, e) {
			return true
		}
	}
	return false
}

// matches reports whether c's pattern is found in actual's text form
// (found says whether the path resolved). A bad pattern is an error even
// when the path does not resolve.
func (c *Condition) matches(actual any, found bool) (bool, error) {
	re, err := compileRegex(Format(c.Value))
	if err != nil {
		return false, fmt.Errorf("condition %s regex: %w", c.Path, err)
	}
	return found && re.MatchString(Format(actual)), nil
}

var regexCache sync.Map // pattern → *regexp.Regexp

func compileRegex(p string) (*regexp.Regexp, error) {
	if re, ok := regexCache.Load(p); ok {
		return re.(*regexp.Regexp), nil
	}
	re, err := regexp.Compile(p)
	if err != nil {
		return nil, err
	}
	regexCache.Store(p, re)
	return re, nil
}

// toNumber converts any Go number, or a numeric string, to float64.
func toNumber(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, !math.IsNaN(n)
	case interface{ Float64() (float64, error) }: // json.Number
		f, err := n.Float64()
		return f, err == nil
	case string:
		s := strings.TrimSpace(n)
		if s == "" {
			return 0, false
		}
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil && !math.IsNaN(f)
	}
	return thread.KindNumber(v)
}

func equal(a, b any) bool {
	if x, ok := toNumber(a); ok {
		if y, ok := toNumber(b); ok {
			return x == y
		}
	}
	if x, ok := thread.Bool(a); ok {
		if y, ok := thread.Bool(b); ok {
			return x == y
		}
	}
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if reflect.DeepEqual(a, b) {
		return true
	}
	return Format(a) == Format(b)
}

// compare orders a and b numerically when both are numbers, else as text.
func compare(a, b any) (int, bool) {
	if x, ok := toNumber(a); ok {
		if y, ok := toNumber(b); ok {
			switch {
			case x < y:
				return -1, true
			case x > y:
				return 1, true
			}
			return 0, true
		}
	}
	sa, aok := a.(string)
	sb, bok := b.(string)
	if !aok || !bok {
		return 0, false
	}
	return strings.Compare(sa, sb), true
}

// listOf returns v's elements: a slice's elements, or for a string (when
// splitStrings) its comma-separated, trimmed parts.
func listOf(v any, splitStrings bool) []any {
	switch x := v.(type) {
	case []any:
		return x
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out
	case string:
		if !splitStrings {
			return []any{x}
		}
		parts := strings.Split(x, ",")
		out := make([]any, len(parts))
		for i, p := range parts {
			out[i] = strings.TrimSpace(p)
		}
		return out
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() == reflect.Slice || rv.Kind() == reflect.Array {
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = rv.Index(i).Interface()
		}
		return out
	}
	if v == nil {
		return nil
	}
	return []any{v}
}

func contains(actual, want any) bool {
	switch a := actual.(type) {
	case string:
		return strings.Contains(a, Format(want))
	case map[string]any:
		_, ok := a[Format(want)]
		return ok
	}
	rv := reflect.ValueOf(actual)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		for _, e := range listOf(actual, false) {
			if equal(e, want) {
				return true
			}
		}
	case reflect.Map:
		if rv.Type().Key().Kind() == reflect.String {
			return rv.MapIndex(reflect.ValueOf(Format(want)).Convert(rv.Type().Key())).IsValid()
		}
	}
	return false
}
