package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// span is one activation as its record has it: its tenant, when it was
// registered (its request), when a worker claimed it and when it ended.
type span struct {
	Tenant                  string
	Created, Started, Ended time.Time
}

// wait is the span's start latency: registration to claim.
func (s span) wait() time.Duration { return s.Started.Sub(s.Created) }

// percentile is the p-th percentile (0..100) of ds by the nearest rank;
// 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	return s[min(max(rank, 1), len(s))-1]
}

// median is the median of xs (the upper one of an even count, as
// benchenv.Median); 0 for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// jain is Jain's fairness index of xs: (Σx)² / (n·Σx²), 1 when all are
// equal, 1/n when one takes everything; 1 for none or all zero.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	if sq == 0 {
		return 1
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// overlap is how long [a0, a1) and [b0, b1) overlap.
func overlap(a0, a1, b0, b1 time.Time) time.Duration {
	lo, hi := a0, a1
	if b0.After(lo) {
		lo = b0
	}
	if b1.Before(hi) {
		hi = b1
	}
	return max(hi.Sub(lo), 0)
}

// fairWindows is what jainWindows found: each window's index over the
// tenants' slot-seconds divided by their weights, and each tenant's
// slot-seconds over all the windows.
type fairWindows struct {
	Index       []float64
	SlotSeconds map[string]float64
}

// jainWindows cuts the time from the first start to the last moment every
// tenant still had a run waiting (its last run's start: until then it was
// backlogged) into whole windows of length w, and gives each window's
// Jain index over the tenants' slot-seconds/weight in it. A tenant of
// weights without a span counts as 0 in every window.
func jainWindows(spans []span, weights map[string]float64, w time.Duration) fairWindows {
	out := fairWindows{SlotSeconds: map[string]float64{}}
	if len(spans) == 0 || w <= 0 {
		return out
	}
	first := spans[0].Started
	lastStart := map[string]time.Time{}
	for _, s := range spans {
		if s.Started.Before(first) {
			first = s.Started
		}
		if s.Started.After(lastStart[s.Tenant]) {
			lastStart[s.Tenant] = s.Started
		}
	}
	until := time.Time{}
	for t := range weights {
		if until.IsZero() || lastStart[t].Before(until) {
			until = lastStart[t]
		}
	}
	for lo := first; !lo.Add(w).After(until); lo = lo.Add(w) {
		hi := lo.Add(w)
		per := map[string]float64{}
		for _, s := range spans {
			per[s.Tenant] += overlap(s.Started, s.Ended, lo, hi).Seconds()
		}
		xs := make([]float64, 0, len(weights))
		for t, wt := range weights {
			xs = append(xs, per[t]/wt)
			out.SlotSeconds[t] += per[t]
		}
		out.Index = append(out.Index, jain(xs))
	}
	return out
}

// table is a Markdown table, printed with its columns padded.
type table struct {
	head  []string
	right []bool // a column aligned right (figures)
	rows  [][]string
}

// newTable makes a table of the given columns; a column named with a
// leading '>' is a figure, aligned right (the '>' is not printed).
func newTable(cols ...string) *table {
	t := &table{}
	for _, c := range cols {
		name, right := strings.CutPrefix(c, ">")
		t.head = append(t.head, name)
		t.right = append(t.right, right)
	}
	return t
}

// add adds a row; a short row is padded with empty cells.
func (t *table) add(cells ...string) {
	row := make([]string, len(t.head))
	copy(row, cells)
	t.rows = append(t.rows, row)
}

// write prints the table to w.
func (t *table) write(w io.Writer) {
	width := make([]int, len(t.head))
	for i, h := range t.head {
		width[i] = max(len([]rune(h)), 3)
	}
	for _, r := range t.rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(cells []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range cells {
			pad := strings.Repeat(" ", width[i]-len([]rune(c)))
			if t.right[i] {
				c = pad + c
			} else {
				c += pad
			}
			b.WriteString(" " + c + " |")
		}
		fmt.Fprintln(w, b.String())
	}
	line(t.head)
	sep := make([]string, len(t.head))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
		if t.right[i] {
			sep[i] = sep[i][1:] + ":"
		}
	}
	line(sep)
	for _, r := range t.rows {
		line(r)
	}
}

// ms formats d in milliseconds.
func ms(d time.Duration) string {
	if d < 10*time.Millisecond {
		return fmt.Sprintf("%.1f", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.0f", float64(d)/float64(time.Millisecond))
}

// thousands formats x with no decimals and commas between thousands.
func thousands(x float64) string {
	s := fmt.Sprintf("%.0f", math.Abs(x))
	var b strings.Builder
	if x < 0 && s != "0" {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
