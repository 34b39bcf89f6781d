package orchestrator

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// TestGroupCost: a report sums each run's own charges exactly (in
// nano-dollars: ten runs of $0.1 are $1, not $0.9999999999), counts a
// graph run once but not its subtree's spend, which its children's rows
// hold, and groups by a tag's value with "(none)" for runs without it.
func TestGroupCost(t *testing.T) {
	t.Parallel()
	day := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	var recs []*registry.Record
	for range 10 {
		recs = append(recs, &registry.Record{Directive: "t/a", CreatedAt: day, Tags: map[string]string{"team": "ops"},
			Cost: thread.Cost{Spend: 0.1, InputTokens: 10, OutputTokens: 1}})
	}
	recs = append(recs, &registry.Record{Directive: "g/review", Kind: registry.KindGraph, CreatedAt: day,
		Cost: thread.Cost{Spend: 1.0}}) // its children's: the ten above
	rep := groupCost(recs, "directive")
	require.Equal(t, 1.0, rep.Total.Spend, "exact, and the graph run's subtree counted once")
	require.Equal(t, 11, rep.Total.Runs)
	require.Equal(t, "t/a", rep.Rows[0].Key)
	require.Equal(t, 1.0, rep.Rows[0].Spend)
	require.Equal(t, 100, rep.Rows[0].InputTokens)
	require.Equal(t, "g/review", rep.Rows[1].Key)
	require.Zero(t, rep.Rows[1].Spend)
	byTeam := groupCost(recs, "tag:team")
	require.Equal(t, "ops", byTeam.Rows[0].Key)
	require.Equal(t, "(none)", byTeam.Rows[1].Key)
	require.Equal(t, "2026-12-01", groupCost(recs, "day").Rows[0].Key)
	require.Error(t, CheckCostKey("tag:"))
	require.Error(t, CheckCostKey("color"))
	require.NoError(t, CheckCostKey("tag:team"))
}

// groupCost is CostReport of recs.
func groupCost(recs []*registry.Record, by string) *spooltype.CostReport {
	g := newCostGroups(by)
	for _, rec := range recs {
		g.add(rec)
	}
	return g.report()
}

// TestCostReportPages: a report reads the runs a page at a time and
// comes to what one pass over them all comes to, the run that ends a page
// counted once.
func TestCostReportPages(t *testing.T) {
	f := idemSetup(t, testenv.Standalone)
	ctx := t.Context()
	for i := range 11 {
		_, err := f.o.reg.Register(ctx, registry.NewThread{ThreadID: fmt.Sprintf("t/p%d-1-%02d", i%3, i), Directive: fmt.Sprintf("t/p%d", i%3),
			Model: "m", Queue: "default"})
		require.NoError(t, err)
	}
	all, err := f.o.reg.List(ctx, Filter{})
	require.NoError(t, err)
	require.Len(t, all, 11)
	want := groupCost(all, "directive")
	old := costPage
	costPage = 3
	t.Cleanup(func() { costPage = old })
	got, err := f.o.CostReport(ctx, "directive", Filter{})
	require.NoError(t, err)
	require.Equal(t, want, got)
	require.Equal(t, 11, got.Total.Runs)
	series, err := f.o.CostSeries(ctx, "directive", Filter{})
	require.NoError(t, err)
	require.Len(t, series.Keys, 3)
}
