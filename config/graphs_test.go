package config

import (
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGraphsConfig(t *testing.T) {
	t.Parallel()
	g, err := LoadGraphs(fstest.MapFS{})
	require.NoError(t, err)
	require.Equal(t, Graphs{}.WithDefaults(), g)
	require.Equal(t, 50, g.SegmentSteps)

	g, err = LoadGraphs(fstest.MapFS{GraphsPath: {Data: []byte("graph:\n  max_state_bytes: 2048\n  segment_steps: 5\n")}})
	require.NoError(t, err)
	require.Equal(t, 2048, g.MaxStateBytes)
	require.Equal(t, 5, g.SegmentSteps)
	require.Equal(t, DefaultSegmentSeconds, g.SegmentSeconds)
	require.Equal(t, DefaultHoldSeconds*time.Second, g.HoldTime(), "the hold's default")

	g, err = LoadGraphs(fstest.MapFS{GraphsPath: {Data: []byte("graph:\n  hold_seconds: 0\n")}})
	require.NoError(t, err)
	require.Zero(t, g.HoldTime(), "0 suspends at once: it is not the default")

	for body, want := range map[string]string{
		"graph:\n  max_state_bytes: 99999999\n": "over the cap",
		"graph:\n  segment_steps: -1\n":         "negative",
		"graph:\n  hold_seconds: -2\n":          "hold_seconds -2 is negative",
		"graph:\n  segmnet_steps: 3\n":          "segmnet_steps",
	} {
		_, err := LoadGraphs(fstest.MapFS{GraphsPath: {Data: []byte(body)}})
		require.ErrorContains(t, err, want, body)
		require.ErrorContains(t, err, GraphsPath, body)
	}
}
