package thread_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// TestUnboundedLimitsAreAbsentInJSON: a count limit that bounds nothing
// (a graph run's turns and tokens) is left out of the JSON of every
// surface that shows limits, and an absent count reads back unbounded, so
// the arithmetic (min with the parent's) is unchanged; a record written
// before, which holds 2147483647, reads the same and shows it absent; set
// limits keep their shape ("limits": {"turns": 25, ...}).
func TestUnboundedLimitsAreAbsentInJSON(t *testing.T) {
	t.Parallel()
	graphRun := thread.Resolved{Turns: thread.Unbounded, Tokens: thread.Unbounded, Spend: 1, Depth: 10, Spawns: 100, Duration: 3600}
	b, err := json.Marshal(graphRun)
	require.NoError(t, err)
	require.Equal(t, `{"spend":1.0,"depth":10,"spawns":100,"duration":3600}`, string(b))
	var back thread.Resolved
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, graphRun, back)

	// A record or transcript written before: the same limits, shown the
	// same.
	var old thread.Resolved
	require.NoError(t, json.Unmarshal([]byte(`{"turns":2147483647,"tokens":2147483647,"spend":1,"depth":10,"spawns":100,"duration":3600}`), &old))
	require.Equal(t, graphRun, old)
	b, err = json.Marshal(old)
	require.NoError(t, err)
	require.NotContains(t, string(b), "2147483647")

	// Every count alike; a zero bounds (it allows nothing) and stays.
	all := thread.Resolved{Turns: thread.Unbounded, Tokens: thread.Unbounded, Depth: thread.Unbounded, Spawns: thread.Unbounded}
	b, err = json.Marshal(all)
	require.NoError(t, err)
	require.Equal(t, `{"spend":0.0,"duration":0}`, string(b))
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, all, back)
	b, err = json.Marshal(thread.Resolved{})
	require.NoError(t, err)
	require.Equal(t, `{"turns":0,"tokens":0,"spend":0.0,"depth":0,"spawns":0,"duration":0}`, string(b))

	// Merged under an unbounded parent, a child keeps its own.
	child, err := thread.MergeLimits(thread.DefaultLimits(), thread.Limits{}, thread.Limits{}, &back)
	require.NoError(t, err)
	require.Equal(t, 25, child.Turns)
	require.Equal(t, 200000, child.Tokens)
	require.True(t, thread.Bounded(child.Turns))
	require.False(t, thread.Bounded(back.Turns))

	// null leaves a value as it is, as encoding/json's own do.
	kept := thread.DefaultLimits()
	require.NoError(t, json.Unmarshal([]byte(`null`), &kept))
	require.Equal(t, thread.DefaultLimits(), kept)
}
