package e2e

import (
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/spooltype"
)

// TestCostReport: `spool cost report` groups what every run spent by
// directive, by a tag's value and by day, with rows that add up to the
// total, and a total equal to the runs' own spend as `thread show` gives
// it; its filters narrow it; a key it cannot group by is a usage error.
func TestCostReport(t *testing.T) {
	t.Parallel()
	e := workerEnv(t, apiProject(), "4")
	const model = "script:scripts/api.yaml"
	var spent float64
	run := func(directive string, args ...string) {
		rec, res := runJSON(t, e, append([]string{directive, "--model", model}, args...)...)
		require.Equal(t, "completed", string(rec.Status), res.Stderr)
		spent += rec.Cost.Spend
	}
	for range 3 {
		run("t/slow", "--tag", "team=ops")
	}
	run("t/greet", "--input", "name=y", "--tag", "team=sales")
	run("t/greet", "--input", "name=x")
	require.Positive(t, spent, "the scripted model charges")

	report := func(args ...string) spooltype.CostReport {
		t.Helper()
		r := e.Spool(append([]string{"cost", "report", "--json"}, args...)...)
		require.Equal(t, 0, r.Code, r.Stderr)
		var rep spooltype.CostReport
		r.JSON(t, &rep)
		var sum float64
		runs := 0
		for _, row := range rep.Rows {
			sum += row.Spend
			runs += row.Runs
		}
		require.InDelta(t, rep.Total.Spend, sum, 1e-9, "rows add up to the total")
		require.Equal(t, rep.Total.Runs, runs)
		return rep
	}
	rep := report("--by", "directive")
	require.InDelta(t, spent, rep.Total.Spend, 1e-9, "every run's own spend")
	require.Equal(t, 5, rep.Total.Runs)
	require.Len(t, rep.Rows, 2)
	require.Equal(t, "t/slow", rep.Rows[0].Key, "most spend first")
	require.Equal(t, 3, rep.Rows[0].Runs)
	require.Positive(t, rep.Rows[0].InputTokens)

	byTeam := map[string]spooltype.CostRow{}
	for _, row := range report("--by", "tag:team").Rows {
		byTeam[row.Key] = row
	}
	require.Equal(t, 3, byTeam["ops"].Runs)
	require.Equal(t, 1, byTeam["sales"].Runs)
	require.Equal(t, 1, byTeam["(none)"].Runs)
	require.Len(t, report("--by", "day").Rows, 1)
	ops := report("--by", "model", "--tag", "team=ops")
	require.Equal(t, 3, ops.Total.Runs)
	require.InDelta(t, byTeam["ops"].Spend, ops.Total.Spend, 1e-12)
	require.Zero(t, report("--since", "1h", "--until", "59m").Total.Runs, "a window before the runs")
	require.False(t, math.IsNaN(rep.Total.Spend))

	r := e.Spool("cost", "report")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Regexp(t, `(?m)^DIRECTIVE +SPEND  RUNS  INPUT TOKENS  OUTPUT TOKENS$`, r.Stdout, "names left, numbers right")
	require.Regexp(t, `(?m)^t/slow +\$\d+\.\d{6} +\d+ +\d+ +\d+$`, r.Stdout)
	require.Regexp(t, `(?m)^total +\$`, r.Stdout)
	r = e.Spool("cost", "report", "--by", "color")
	require.Equal(t, 2, r.Code)
	require.Equal(t, 1, strings.Count(strings.TrimSpace(r.Stderr), "\n")+1, r.Stderr)
	require.Contains(t, r.Stderr, "want directive, model, tenant, day or tag:KEY")
}
