package monitor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCountsReused: counts are reused for CountsTTL, or for countsDuty
// times as long as counting took when that is longer, so a registry too
// large to count every 2 s is counted a few percent of the time; a
// negative CountsTTL counts on every request.
func TestCountsReused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		ttl, took, age time.Duration
		want           bool
	}{
		{2 * time.Second, time.Millisecond, time.Second, true},
		{2 * time.Second, time.Millisecond, 3 * time.Second, false},
		{2 * time.Second, time.Second, 20 * time.Second, true}, // a slow count: reused for 30 s
		{2 * time.Second, time.Second, 31 * time.Second, false},
		{-1, time.Second, 0, false},
	} {
		require.Equal(t, tc.want, countsReused(tc.ttl, tc.took, tc.age), "%+v", tc)
	}
}
