package admission

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestSpendOfReadsOverrun: a tenant's spend windows of now carry their
// overrun (what its runs spent beyond their allowances) in USD, beside
// spent and held; an older window's is not counted.
func TestSpendOfReadsOverrun(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 2, 15, 0, 0, 0, time.UTC)
	limit := 2.5
	got := spendOf(map[string]string{
		"d:2026-12-02:spent": "2500000000", "d:2026-12-02:held": "0", "d:2026-12-02:overrun": "500000000",
		"d:2026-12-01:overrun": "900000000", "m:2026-12:spent": "3500000000", "m:2026-12:overrun": "1400000000",
	}, Settings{SpendPerDay: &limit}, now)
	require.InDelta(t, 2.5, got["day"].Spent, 1e-12)
	require.InDelta(t, 0.5, got["day"].Overrun, 1e-12)
	require.InDelta(t, 1.4, got["month"].Overrun, 1e-12)
	require.Equal(t, &limit, got["day"].Limit)
}

// TestSpendOfReadsAsWritten: a window's nano-dollars read as the dollars
// a person would write (0.0486, not 0.048600000000000004), in `tenant
// show --json`, the API and the metrics.
func TestSpendOfReadsAsWritten(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 12, 4, 15, 0, 0, 0, time.UTC)
	got := spendOf(map[string]string{"d:2026-12-04:spent": "48600000", "m:2026-12:spent": "1310000", "m:2026-12:held": "300000000"}, Settings{}, now)
	require.Equal(t, "0.0486", strconv.FormatFloat(got["day"].Spent, 'g', -1, 64))
	require.Equal(t, "0.00131", strconv.FormatFloat(got["month"].Spent, 'g', -1, 64))
	require.Equal(t, "0.3", strconv.FormatFloat(got["month"].Held, 'g', -1, 64))
}
