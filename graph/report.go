package graph

import (
	"errors"
	"sort"
	"strings"

	"github.com/spool-run/spool/internal/spelling"
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

// unknownKey is the message for a key nobody knows.
func unknownKey(k string, known []string) string {
	msg := "unknown key `" + k + "`"
	if n := spelling.Nearest(k, known); n != "" {
		msg += " (did you mean `" + n + "`?)"
	}
	return msg
}
