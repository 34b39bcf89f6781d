package thread

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestLimitsFromMap(t *testing.T) {
	l, err := LimitsFromMap(map[string]any{"turns": 3.0, "spend": "0.25", "depth": "2", "duration": 30})
	require.NoError(t, err)
	require.Equal(t, 3, *l.Turns)
	require.Equal(t, 0.25, *l.Spend)
	require.Equal(t, 2, *l.Depth)
	require.Equal(t, 30.0, *l.Duration)
	require.Nil(t, l.Tokens)

	for _, bad := range []map[string]any{
		{"spend": "abc"}, {"turns": -1.0}, {"bogus": 1.0}, {"tokens": true}, {"spend": "NaN"}, {"turns": 2.5}, {"spawns": "1e12"},
	} {
		_, err := LimitsFromMap(bad)
		require.Error(t, err, "%v", bad)
	}
}
