package blobstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
)

// watchLog records what a Watcher is told.
type watchLog struct {
	mu    sync.Mutex
	calls []string
	since time.Time
}

func (w *watchLog) Stalled(_ context.Context, op, key string, since time.Time, _ error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, "stalled "+op+" "+key)
	w.since = since
}

func (w *watchLog) Answered(context.Context) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.calls = append(w.calls, "answered")
}

// TestRetryingWatch: the watcher hears of each wait of an operation that
// fails (with when it first failed) and of each answer, a not-found one
// too, and not of an operation whose caller gave up.
func TestRetryingWatch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &flaky{Store: blobstore.NewMemory()}
	w := &watchLog{}
	s := blobstore.Retrying(f, blobstore.RetryConfig{Patience: 5 * time.Second, First: 10 * time.Millisecond, Max: 20 * time.Millisecond,
		Watch: w})
	require.NoError(t, s.Put(ctx, "a", []byte("1")))
	_, err := s.Get(ctx, "missing")
	require.ErrorIs(t, err, blobstore.ErrNotFound)
	require.Equal(t, []string{"answered", "answered"}, w.calls)

	w.calls = nil
	f.down.Store(true)
	start := time.Now()
	go func() { time.Sleep(50 * time.Millisecond); f.down.Store(false) }()
	require.NoError(t, s.Put(ctx, "b", []byte("2")))
	w.mu.Lock()
	require.GreaterOrEqual(t, len(w.calls), 2)
	require.Equal(t, "stalled put b", w.calls[0])
	require.Equal(t, "answered", w.calls[len(w.calls)-1])
	require.WithinDuration(t, start, w.since, 20*time.Millisecond, "since: the first failure")
	w.mu.Unlock()

	w.calls = nil
	f.down.Store(true)
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	require.Error(t, s.Put(cctx, "c", []byte("3")))
	w.mu.Lock()
	defer w.mu.Unlock()
	require.NotContains(t, w.calls, "answered", "a caller that gave up got no answer")
}
