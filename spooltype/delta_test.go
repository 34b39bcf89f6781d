package spooltype

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestDeltaCursor(t *testing.T) {
	var c DeltaCursor
	take := func(d Delta) string {
		got, ok := c.Take(d)
		if !ok {
			return "-"
		}
		return got.Text
	}
	require.Equal(t, "Hel", take(Delta{Turn: 1, Offset: 0, Text: "Hel"}))
	require.Equal(t, "lo", take(Delta{Turn: 1, Offset: 0, Text: "Hello"}), "a snapshot overlapping what the reader has is cut")
	require.Equal(t, "-", take(Delta{Turn: 1, Offset: 3, Text: "lo"}), "what it has is skipped")
	require.Equal(t, " world", take(Delta{Turn: 1, Offset: 5, Text: " world"}))
	got, ok := c.Take(Delta{Turn: 1, Offset: 20, Text: "!"})
	require.True(t, ok, "a delta past a gap is taken, its offset says text is missing")
	require.Equal(t, 20, got.Offset)
	require.Equal(t, "again", take(Delta{Turn: 1, Attempt: 1, Offset: 0, Text: "again"}), "a retried call writes from 0")
	require.Equal(t, "-", take(Delta{Turn: 1, Attempt: 0, Offset: 30, Text: "late"}), "an earlier attempt's delta is stale")
	require.Equal(t, "next", take(Delta{Turn: 2, Offset: 0, Text: "next"}))
	require.Equal(t, "-", take(Delta{Turn: 1, Attempt: 1, Offset: 5, Text: "late"}))
}

func TestDeltaCursorCalls(t *testing.T) {
	var c DeltaCursor
	for _, d := range []Delta{{Turn: 1, Offset: 0, Text: "ab"}, {Turn: 1, CallID: "c1", Offset: 0, Text: `{"p`}, {Turn: 1, CallID: "c1", Offset: 0, Text: `{"path"`},
		{Turn: 1, Offset: 2, Text: "cd"}} {
		got, ok := c.Take(d)
		require.True(t, ok, "%+v", d)
		if d.CallID == "c1" && d.Text == `{"path"` {
			require.Equal(t, `ath"`, got.Text, "each call has its own offsets")
			require.Equal(t, 3, got.Offset)
		}
	}
	_, ok := c.Take(Delta{Turn: 1, CallID: "c1", Offset: 0, Text: `{"path"`})
	require.False(t, ok)
}
