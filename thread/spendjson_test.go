package thread_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// A record's spend reads as a float in JSON even when whole (CLI.md shows
// "spend": 0.0 and 1.0), everything else as encoding/json writes it, and
// the JSON reads back to the same values.
func TestSpendIsAFloatInJSON(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{thread.Cost{Turns: 3}, `{"turns":3,"input_tokens":0,"output_tokens":0,"spend":0.0}`},
		{thread.Cost{Turns: 1, InputTokens: 100, Spend: 0.00015, ElapsedSeconds: 2},
			`{"turns":1,"input_tokens":100,"output_tokens":0,"spend":0.00015,"elapsed_seconds":2}`},
		{thread.Cost{Spend: 2}, `{"turns":0,"input_tokens":0,"output_tokens":0,"spend":2.0}`},
		{thread.Cost{Spend: 1e-7}, `{"turns":0,"input_tokens":0,"output_tokens":0,"spend":1e-7}`},
		{thread.Cost{Spend: 1e21}, `{"turns":0,"input_tokens":0,"output_tokens":0,"spend":1e+21}`},
		{thread.DefaultLimits(), `{"turns":25,"tokens":200000,"spend":1.0,"depth":10,"spawns":10,"duration":600}`},
		{thread.Resolved{Spend: 0.5, Duration: 1.5}, `{"turns":0,"tokens":0,"spend":0.5,"depth":0,"spawns":0,"duration":1.5}`},
	} {
		b, err := json.Marshal(tc.v)
		require.NoError(t, err)
		require.Equal(t, tc.want, string(b))
		switch v := tc.v.(type) {
		case thread.Cost:
			var back thread.Cost
			require.NoError(t, json.Unmarshal(b, &back))
			require.Equal(t, v, back)
		case thread.Resolved:
			var back thread.Resolved
			require.NoError(t, json.Unmarshal(b, &back))
			require.Equal(t, v, back)
		}
	}
}
