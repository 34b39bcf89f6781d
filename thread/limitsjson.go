package thread

import (
	"encoding/json"
	"math"
)

// Unbounded is the value of a count limit (turns, tokens, depth, spawns)
// that bounds nothing: a graph run's turns and tokens, which it makes no
// model calls to spend (each child's own directive bounds its own). The
// arithmetic needs no case for it: a merge's min() leaves any other
// value under it, and no count reaches it (SetLimit refuses counts above
// it). Nothing shows it: in JSON an unbounded count is absent, and an
// absent count reads back as Unbounded.
const Unbounded = math.MaxInt32

// resolvedJSON is Resolved as JSON: a count limit is absent when it is
// Unbounded.
type resolvedJSON struct {
	Turns    *int    `json:"turns,omitempty"`
	Tokens   *int    `json:"tokens,omitempty"`
	Spend    float64 `json:"spend"`
	Depth    *int    `json:"depth,omitempty"`
	Spawns   *int    `json:"spawns,omitempty"`
	Duration float64 `json:"duration"` // seconds
}

// bounded is a count limit as JSON: nil when it is Unbounded.
func bounded(n int) *int {
	if n >= Unbounded {
		return nil
	}
	return &n
}

// orUnbounded is a count limit read from JSON: Unbounded when absent.
func orUnbounded(n *int) int {
	if n == nil {
		return Unbounded
	}
	return *n
}

// Bounded reports whether the count limit n bounds anything (is not
// Unbounded): what a reader that prints limits asks before printing n.
func Bounded(n int) bool { return n < Unbounded }

// MarshalJSON writes r with its unbounded counts left out (a record
// written before they were, which holds 2147483647, reads back the same
// and is shown the same), and spend always a number with a fraction or
// an exponent (floatSpend).
func (r Resolved) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(resolvedJSON{Turns: bounded(r.Turns), Tokens: bounded(r.Tokens), Spend: r.Spend,
		Depth: bounded(r.Depth), Spawns: bounded(r.Spawns), Duration: r.Duration})
	return floatSpend(b), err
}

// UnmarshalJSON reads r as MarshalJSON writes it: an absent count is
// Unbounded (null, as encoding/json's own, leaves r as it is).
func (r *Resolved) UnmarshalJSON(b []byte) error {
	if string(b) == "null" {
		return nil
	}
	var j resolvedJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = Resolved{Turns: orUnbounded(j.Turns), Tokens: orUnbounded(j.Tokens), Spend: j.Spend,
		Depth: orUnbounded(j.Depth), Spawns: orUnbounded(j.Spawns), Duration: j.Duration}
	return nil
}
