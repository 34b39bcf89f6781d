package admission

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseOverrides: `tenant set`'s field=value texts are read as the
// policy file's values, each bad one an error naming the field, the text
// and what it wants, an unknown field one naming the known ones.
func TestParseOverrides(t *testing.T) {
	t.Parallel()
	ts, err := ParseOverrides(map[string]string{"weight": "2.5", "priority": "1", "max_running": "4", "spend_per_day": "0",
		"spend_per_month": "10.25", "starts_per_minute": "60", "runs_in_flight": "3", "on_exhausted": "refuse", "spend_grant": "0.5"})
	require.NoError(t, err)
	require.Equal(t, 2.5, *ts.Weight)
	require.Equal(t, 1, *ts.Priority)
	require.Equal(t, 4, *ts.MaxRunning)
	require.Equal(t, 0.0, *ts.SpendPerDay)
	require.Equal(t, 10.25, *ts.SpendPerMonth)
	require.Equal(t, 60, *ts.StartsPerMinute)
	require.Equal(t, 3, *ts.RunsInFlight)
	require.Equal(t, OnExhaustedRefuse, ts.OnExhausted)
	require.Equal(t, 0.5, *ts.SpendGrant)

	for f, c := range map[string]struct{ v, err string }{
		"weight":            {"0", `weight "0": want a number, 0.01 .. 1000`},
		"priority":          {"6", `priority "6": want a whole number, 1 .. 5`},
		"max_running":       {"1.5", `max_running "1.5": want a whole number, ≥ 1`},
		"spend_per_day":     {"NaN", `spend_per_day "NaN": want a number, ≥ 0`},
		"spend_per_month":   {"-1", `spend_per_month "-1": want a number, ≥ 0`},
		"starts_per_minute": {"0", `starts_per_minute "0": want a whole number, ≥ 1`},
		"runs_in_flight":    {"x", `runs_in_flight "x": want a whole number, ≥ 1`},
		"on_exhausted":      {"later", `on_exhausted "later": want wait or refuse`},
		"spend_grant":       {"0", `spend_grant "0": want a number, ≥ 1e-06`},
		"speed":             {"1", `"speed": unknown setting (known: ` + strings.Join(Fields, ", ") + `)`},
		"max_runing":        {"1", `"max_runing": unknown setting; did you mean max_running? (known: ` + strings.Join(Fields, ", ") + `)`},
	} {
		_, err := ParseOverrides(map[string]string{f: c.v})
		require.EqualError(t, err, c.err, f)
	}
}
