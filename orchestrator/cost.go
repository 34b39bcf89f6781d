package orchestrator

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
)

// Cost reports. A report groups every run f selects (its time range,
// tenant, tags, directive) by one key and sums what each run itself spent
// (Record.Cost: its turns' charges, which the ledger holds and its
// transcript records; a graph run's own are none, as it makes no model
// call, and its children are rows of their own). Sums are kept in nano-dollars, as the ledger
// charges, so the report is exact. It reads the records of the runs
// selected a page at a time (costPage), from the index that holds them
// (registry.Registry.List), keeping running sums: its memory is a page
// and the groups, whatever the count of runs.

// CostKeys are the keys a report groups by; "tag:KEY" groups by a tag's
// value.
var CostKeys = []string{"directive", "model", "tenant", "day", "tag:KEY"}

// CheckCostKey refuses a key a report cannot group by.
func CheckCostKey(by string) error {
	if k, ok := strings.CutPrefix(by, "tag:"); ok && k != "" {
		return nil
	}
	if slices.Contains(CostKeys[:4], by) {
		return nil
	}
	return fmt.Errorf("--by %q: want directive, model, tenant, day or tag:KEY", by)
}

// costKey is rec's value of key by; "(none)" for a run without the tag
// or model.
func costKey(rec *registry.Record, by string) string {
	var k string
	switch by {
	case "directive":
		k = rec.Directive
	case "model":
		k = rec.Model
	case "tenant":
		k = rec.TenantOrDefault()
	case "day":
		k = rec.CreatedAt.UTC().Format("2006-01-02")
	default:
		k = rec.Tags[strings.TrimPrefix(by, "tag:")]
	}
	if k == "" {
		return "(none)"
	}
	return k
}

// CostReport groups the runs f selects by key by (CheckCostKey); f's
// Limit is ignored.
func (o *Orchestrator) CostReport(ctx context.Context, by string, f Filter) (*spooltype.CostReport, error) {
	if err := CheckCostKey(by); err != nil {
		return nil, err
	}
	g := newCostGroups(by)
	if err := o.eachRun(ctx, f, g.add); err != nil {
		return nil, err
	}
	return g.report(), nil
}

// costPage is how many records a report reads at a time (a variable for
// tests).
var costPage = 1000

// eachRun calls fn with every run f selects (f's Limit ignored), newest
// first, reading a page of costPage records at a time, so that a report
// over a million runs holds one page, not all of them.
func (o *Orchestrator) eachRun(ctx context.Context, f Filter, fn func(*registry.Record)) error {
	f.Limit = costPage
	for {
		recs, err := o.reg.List(ctx, f)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			fn(rec)
		}
		if len(recs) < costPage {
			return nil
		}
		cur := registry.CursorOf(recs[len(recs)-1])
		f.After = &cur
	}
}

// ownSpend is what rec itself was charged, in nano-dollars: a thread's
// turns; a graph run makes no model call of its own, and its record's
// spend is its subtree's (its children are runs of their own).
func ownSpend(rec *registry.Record) int64 {
	if rec.IsGraph() {
		return 0
	}
	return int64(math.Round(rec.Cost.Spend * 1e9))
}

// costSum is what a group of runs spent and used.
type costSum struct {
	nano     int64
	runs, in int
	out      int
}

// costGroups are the running sums of a report, by key and in all.
type costGroups struct {
	by     string
	groups map[string]*costSum
	total  costSum
}

func newCostGroups(by string) *costGroups {
	return &costGroups{by: by, groups: map[string]*costSum{}}
}

// add counts rec in its group and the total.
func (c *costGroups) add(rec *registry.Record) {
	k := costKey(rec, c.by)
	g := c.groups[k]
	if g == nil {
		g = &costSum{}
		c.groups[k] = g
	}
	nano := ownSpend(rec)
	for _, s := range []*costSum{g, &c.total} {
		s.nano += nano
		s.runs++
		s.in += rec.Cost.InputTokens
		s.out += rec.Cost.OutputTokens
	}
}

// report is the sums as a report's rows, most spend first.
func (c *costGroups) report() *spooltype.CostReport {
	row := func(k string, s costSum) spooltype.CostRow {
		return spooltype.CostRow{Key: k, Spend: float64(s.nano) / 1e9, Runs: s.runs, InputTokens: s.in, OutputTokens: s.out}
	}
	rep := &spooltype.CostReport{By: c.by, Rows: []spooltype.CostRow{}, Total: row("total", c.total)}
	for k, s := range c.groups {
		rep.Rows = append(rep.Rows, row(k, *s))
	}
	slices.SortFunc(rep.Rows, func(a, b spooltype.CostRow) int {
		if c := cmp.Compare(b.Spend, a.Spend); c != 0 {
			return c
		}
		return cmp.Compare(a.Key, b.Key)
	})
	return rep
}

// CostSeries is spend over time: for each UTC day of the runs f selects
// (oldest first), what the runs of each key (CostReport's by) spent that
// day, the keys ordered by their total, most first.
type CostSeries struct {
	Days  []string
	Keys  []string
	Spend map[string]map[string]float64 // day → key → USD
}

// CostSeries groups the runs f selects by UTC day of their creation and
// key by (CheckCostKey).
func (o *Orchestrator) CostSeries(ctx context.Context, by string, f Filter) (*CostSeries, error) {
	if err := CheckCostKey(by); err != nil {
		return nil, err
	}
	nano := map[string]map[string]int64{}
	totals := map[string]int64{}
	err := o.eachRun(ctx, f, func(rec *registry.Record) {
		day, k := costKey(rec, "day"), costKey(rec, by)
		if nano[day] == nil {
			nano[day] = map[string]int64{}
		}
		n := ownSpend(rec)
		nano[day][k] += n
		totals[k] += n
	})
	if err != nil {
		return nil, err
	}
	cs := &CostSeries{Spend: map[string]map[string]float64{}}
	for day, keys := range nano {
		cs.Days = append(cs.Days, day)
		cs.Spend[day] = map[string]float64{}
		for k, n := range keys {
			cs.Spend[day][k] = float64(n) / 1e9
		}
	}
	slices.Sort(cs.Days)
	for k := range totals {
		cs.Keys = append(cs.Keys, k)
	}
	slices.SortFunc(cs.Keys, func(a, b string) int {
		if c := cmp.Compare(totals[b], totals[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return cs, nil
}
