package thread

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Limit codes, as the spec names them.
const (
	CodeSpendExceeded    = "spend_exceeded"
	CodeTurnsExceeded    = "turns_exceeded"
	CodeTokensExceeded   = "tokens_exceeded"
	CodeDurationExceeded = "duration_seconds_exceeded"
	CodeSpawnsExceeded   = "spawns_exceeded"
	CodeDepthExceeded    = "depth_exceeded"
)

// LimitError reports an exceeded limit. errors.Is matches any *LimitError
// with the same Code, so callers can test errors.Is(err, &LimitError{Code: CodeSpendExceeded}).
type LimitError struct {
	Code    string
	Current float64
	Max     float64
	Message string
}

func (e *LimitError) Error() string {
	s := fmt.Sprintf("%s: %g of %g", e.Code, e.Current, e.Max)
	if e.Message != "" {
		s = e.Code + ": " + e.Message
	}
	if h := RaiseHint(e.Code); h != "" {
		s += " (" + h + ")"
	}
	return s
}

// limitOfCode is the limit each limit code is about.
var limitOfCode = map[string]string{
	CodeTurnsExceeded: "turns", CodeTokensExceeded: "tokens", CodeSpendExceeded: "spend",
	CodeDurationExceeded: "duration", CodeSpawnsExceeded: "spawns", CodeDepthExceeded: "depth",
}

// RaiseHint says how to raise the limit a limit code is about, in each
// place a limit is set: "to raise it: <limits tokens=...> in the
// directive, --limit tokens=N, or limits: {tokens: N} in
// .ai/config/agent/resilience.yaml". "" for a code that is no limit's.
func RaiseHint(code string) string {
	name, ok := limitOfCode[code]
	if !ok {
		return ""
	}
	return fmt.Sprintf("to raise it: <limits %[1]s=\"...\"> in the directive, --limit %[1]s=N, or limits: {%[1]s: N} in .ai/config/agent/resilience.yaml", name)
}

// Is matches another *LimitError with the same code.
func (e *LimitError) Is(target error) bool {
	var t *LimitError
	if errors.As(target, &t) {
		return t.Code == e.Code
	}
	return false
}

// Limits bound a thread. A nil pointer field is "not set" at its layer;
// Resolved limits have every field set.
//
// A limit's value is what it allows, and 0 allows nothing, for every limit
// alike: turns 0 runs no turn, spend 0 reserves and may spend nothing
// (the ledger's meaning), spawns 0 starts no child, depth 0 allows no
// children below. There is no "unlimited" value: the merge takes min()
// with the parent's limits, so a 0 anywhere up the tree caps everything
// below it, as it says. Ask for a large number instead.
type Limits struct {
	Turns    *int     `json:"turns,omitempty" yaml:"turns,omitempty"`
	Tokens   *int     `json:"tokens,omitempty" yaml:"tokens,omitempty"`
	Spend    *float64 `json:"spend,omitempty" yaml:"spend,omitempty"`
	Depth    *int     `json:"depth,omitempty" yaml:"depth,omitempty"`
	Spawns   *int     `json:"spawns,omitempty" yaml:"spawns,omitempty"`
	Duration *float64 `json:"duration,omitempty" yaml:"duration,omitempty"` // seconds
}

// Resolved is a fully resolved set of limits, as stored on a thread.
type Resolved struct {
	Turns    int     `json:"turns"`
	Tokens   int     `json:"tokens"`
	Spend    float64 `json:"spend"`
	Depth    int     `json:"depth"`
	Spawns   int     `json:"spawns"`
	Duration float64 `json:"duration"` // seconds
}

// DefaultLimits are the defaults a project without resilience.yaml gets:
// the reference's, but for tokens, which count every turn's input and
// output: 200,000 (as the reference's own project documentation uses) lets
// a real agent run; the reference's older 4096 stopped one after a turn
// or two.
func DefaultLimits() Resolved {
	return Resolved{Turns: 25, Tokens: 200000, Spend: 1.0, Depth: 10, Spawns: 10, Duration: 600}
}

// Layer returns r as a Limits layer with every field set.
func (r Resolved) Layer() Limits {
	return Limits{Turns: &r.Turns, Tokens: &r.Tokens, Spend: &r.Spend, Depth: &r.Depth, Spawns: &r.Spawns, Duration: &r.Duration}
}

// Apply overlays the set fields of l onto r.
func (r Resolved) Apply(l Limits) Resolved {
	overlay(&r.Turns, l.Turns)
	overlay(&r.Tokens, l.Tokens)
	overlay(&r.Spend, l.Spend)
	overlay(&r.Depth, l.Depth)
	overlay(&r.Spawns, l.Spawns)
	overlay(&r.Duration, l.Duration)
	return r
}

// overlay sets *dst to *v when v is set.
func overlay[T any](dst, v *T) {
	if v != nil {
		*dst = *v
	}
}

// MergeLimits resolves limits as the spec's step 4: defaults → directive →
// overrides, then capped by the parent's limits via min(), with depth one
// less than the parent's. parent is nil for a root thread. A resolved depth
// below 0 is a depth_exceeded *LimitError.
func MergeLimits(defaults Resolved, directive, overrides Limits, parent *Resolved) (Resolved, error) {
	r := defaults.Apply(directive).Apply(overrides)
	if parent != nil {
		r.Turns = min(r.Turns, parent.Turns)
		r.Tokens = min(r.Tokens, parent.Tokens)
		r.Spend = min(r.Spend, parent.Spend)
		r.Spawns = min(r.Spawns, parent.Spawns)
		r.Duration = min(r.Duration, parent.Duration)
		r.Depth = min(r.Depth, parent.Depth-1)
	}
	if r.Depth < 0 {
		pd := -1
		if parent != nil {
			pd = parent.Depth
		}
		return r, &LimitError{Code: CodeDepthExceeded, Current: float64(r.Depth), Max: 0,
			Message: fmt.Sprintf("resolved depth %d is below 0 (parent depth %d)", r.Depth, pd)}
	}
	return r, nil
}

// Validate rejects negative or non-finite limits, naming the bad field.
func (r Resolved) Validate() error {
	switch {
	case r.Turns < 0:
		return fmt.Errorf("limits: turns %d is negative", r.Turns)
	case r.Tokens < 0:
		return fmt.Errorf("limits: tokens %d is negative", r.Tokens)
	case r.Spend < 0 || r.Spend != r.Spend:
		return fmt.Errorf("limits: spend %g is not a non-negative number", r.Spend)
	case r.Spawns < 0:
		return fmt.Errorf("limits: spawns %d is negative", r.Spawns)
	case r.Duration < 0 || r.Duration != r.Duration:
		return fmt.Errorf("limits: duration %g is not a non-negative number", r.Duration)
	}
	return nil
}

// LimitNames are the names of the limits, as flags, YAML keys and spawn
// parameters spell them.
var LimitNames = []string{"turns", "tokens", "spend", "depth", "spawns", "duration"}

// LimitValueError is a value SetLimit refuses for the limit Name, or a
// Name that is no limit. Reason says what is wrong with the value: "not a
// number", "negative", "not a whole number", "too large", or "unknown
// limit".
type LimitValueError struct {
	Name   string
	Value  any
	Reason string
}

func (e *LimitValueError) Error() string {
	if e.Reason == "unknown limit" {
		return fmt.Sprintf("unknown limit %q (want %s)", e.Name, strings.Join(LimitNames, ", "))
	}
	v := fmt.Sprint(e.Value)
	if s, ok := e.Value.(string); ok && e.Reason == "not a number" {
		v = strconv.Quote(s)
	}
	return fmt.Sprintf("limit %s: %s is %s", e.Name, v, e.Reason)
}

// SetLimit sets one named limit from a number (Number: any Go number, a
// json.Number or a numeric string; models, command lines, YAML and
// directives write all of them). Negative values, fractions of a count
// (turns, tokens, depth, spawns), counts above 2^31-1 and unknown names
// are a *LimitValueError.
func (l *Limits) SetLimit(name string, value any) error {
	bad := func(reason string) error { return &LimitValueError{Name: name, Value: value, Reason: reason} }
	if !slices.Contains(LimitNames, name) {
		return bad("unknown limit")
	}
	f, err := Number(value)
	switch {
	case err != nil:
		return bad("not a number")
	case f < 0:
		return bad("negative")
	}
	if name != "spend" && name != "duration" {
		if f != math.Trunc(f) {
			return bad("not a whole number")
		}
		if f > math.MaxInt32 {
			return bad("too large")
		}
	}
	n := int(f)
	switch name {
	case "turns":
		l.Turns = &n
	case "tokens":
		l.Tokens = &n
	case "spend":
		l.Spend = &f
	case "depth":
		l.Depth = &n
	case "spawns":
		l.Spawns = &n
	case "duration":
		l.Duration = &f
	}
	return nil
}

// LimitsFromMap reads limit overrides from a map of name → number or
// numeric string.
func LimitsFromMap(m map[string]any) (Limits, error) {
	var l Limits
	for k, v := range m {
		if err := l.SetLimit(k, v); err != nil {
			return Limits{}, err
		}
	}
	return l, nil
}
