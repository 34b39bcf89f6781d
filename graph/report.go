package graph

import (
	"errors"
	"sort"
	"strings"
)

// Diagnostic is one validation error or warning. Node is "" for the graph
// level, where Key is a path from the top of the file ("config.start");
// for a node, Key is a path inside the node ("max_concurrency",
// "next[1].when"). Line is the file line when known (0 otherwise).
type Diagnostic struct {
	Node    string `json:"node,omitempty"`
	Key     string `json:"key,omitempty"`
	Message string `json:"message"`
	Line    int    `json:"line,omitempty"`
}

// String reads "node review_files: max_concurrency: must be 1..256" or
// "config.start: missing".
func (d Diagnostic) String() string {
	var b strings.Builder
	if d.Node != "" {
		b.WriteString("node ")
		b.WriteString(d.Node)
		b.WriteString(": ")
	}
	if d.Key != "" {
		b.WriteString(d.Key)
		b.WriteString(": ")
	}
	b.WriteString(d.Message)
	return b.String()
}

// Report is what validation found.
type Report struct {
	Errors   []Diagnostic `json:"errors"`
	Warnings []Diagnostic `json:"warnings"`
}

// Err is nil when r has no errors, else one error listing them, one
// diagnostic each, joined with "; ".
func (r Report) Err() error {
	if len(r.Errors) == 0 {
		return nil
	}
	parts := make([]string, len(r.Errors))
	for i, d := range r.Errors {
		parts[i] = d.String()
	}
	return errors.New(strings.Join(parts, "; "))
}

// OK reports whether r has no errors.
func (r Report) OK() bool { return len(r.Errors) == 0 }

func (r *Report) errorf(node, key, msg string) {
	r.Errors = append(r.Errors, Diagnostic{Node: node, Key: key, Message: msg})
}

func (r *Report) warnf(node, key, msg string) {
	r.Warnings = append(r.Warnings, Diagnostic{Node: node, Key: key, Message: msg})
}

// add appends o's diagnostics.
func (r *Report) add(o Report) {
	r.Errors = append(r.Errors, o.Errors...)
	r.Warnings = append(r.Warnings, o.Warnings...)
}

// sortBy orders diagnostics graph level first, then by node in file
// order, keeping the order they were found in otherwise; exact duplicates
// are dropped.
func (r *Report) sortBy(order []string) {
	pos := make(map[string]int, len(order))
	for i, n := range order {
		pos[n] = i + 1
	}
	rank := func(d Diagnostic) int {
		if d.Node == "" {
			return 0
		}
		if p, ok := pos[d.Node]; ok {
			return p
		}
		return len(order) + 1
	}
	for _, ds := range []*[]Diagnostic{&r.Errors, &r.Warnings} {
		sort.SliceStable(*ds, func(i, j int) bool { return rank((*ds)[i]) < rank((*ds)[j]) })
		seen := map[Diagnostic]bool{}
		out := (*ds)[:0]
		for _, d := range *ds {
			k := d
			k.Line = 0
			if !seen[k] {
				seen[k] = true
				out = append(out, d)
			}
		}
		*ds = out
	}
}

// Nearest is the candidate s is a likely misspelling of ("" for none):
// a graph's name, a node's.
func Nearest(s string, candidates []string) string { return nearest(s, candidates) }

// nearest returns the candidate closest to s by edit distance, "" when
// none is close enough to be a likely typo (1 edit for short words, up to
// 3 for long ones). Ties go to the earlier candidate.
func nearest(s string, candidates []string) string {
	limit := 3
	switch {
	case len(s) <= 3:
		limit = 1
	case len(s) <= 6:
		limit = 2
	}
	best, bestD := "", limit+1
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Damerau-Levenshtein (optimal string alignment)
// distance between a and b.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 99
	}
	ra, rb := []rune(a), []rune(b)
	d := make([][]int, len(ra)+1)
	for i := range d {
		d[i] = make([]int, len(rb)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(ra)][len(rb)]
}

// unknownKey is the message for a key nobody knows.
func unknownKey(k string, known []string) string {
	msg := "unknown key `" + k + "`"
	if n := nearest(k, known); n != "" {
		msg += " (did you mean `" + n + "`?)"
	}
	return msg
}
