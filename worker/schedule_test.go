package worker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProcessAtNeverEarly: asynq schedules by whole seconds, so a time is
// rounded up to the next whole second, and a whole second stays.
func TestProcessAtNeverEarly(t *testing.T) {
	t.Parallel()
	base := time.Date(2026, 11, 22, 14, 40, 14, 0, time.UTC)
	for _, tc := range []struct{ at, due time.Time }{
		{base, base},
		{base.Add(time.Nanosecond), base.Add(time.Second)},
		{base.Add(531 * time.Millisecond), base.Add(time.Second)},
		{base.Add(999 * time.Millisecond), base.Add(time.Second)},
	} {
		got, ok := asynqProcessAt(tc.at).Value().(time.Time)
		require.True(t, ok)
		require.True(t, got.Equal(tc.due), "%v: due %v, want %v", tc.at, got, tc.due)
		require.False(t, got.Before(tc.at))
	}
}
