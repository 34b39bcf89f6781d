package blobstore_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/blobstore/blobstoretest"
)

// flaky fails every operation while down is set, and may drop a put's
// reply after writing it (lost answers).
type flaky struct {
	blobstore.Store
	down      atomic.Bool
	loseReply atomic.Bool
	calls     atomic.Int64
}

var errDown = errors.New("connection refused")

func (f *flaky) Put(ctx context.Context, key string, data []byte) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	return f.Store.Put(ctx, key, data)
}

func (f *flaky) PutIfAbsent(ctx context.Context, key string, data []byte) error {
	f.calls.Add(1)
	if f.down.Load() {
		return errDown
	}
	err := f.Store.PutIfAbsent(ctx, key, data)
	if err == nil && f.loseReply.Swap(false) {
		return errors.New("i/o timeout") // written, but the answer is lost
	}
	return err
}

func (f *flaky) Get(ctx context.Context, key string) ([]byte, error) {
	f.calls.Add(1)
	if f.down.Load() {
		return nil, errDown
	}
	return f.Store.Get(ctx, key)
}

func TestRetryingRidesOutAnOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := &flaky{Store: blobstore.NewMemory()}
	var retried atomic.Int64
	s := blobstore.Retrying(f, blobstore.RetryConfig{Patience: 5 * time.Second, First: 10 * time.Millisecond, Max: 50 * time.Millisecond,
		OnRetry: func(string, error) { retried.Add(1) }})

	// Down for 300ms: the write waits it out and lands.
	f.down.Store(true)
	time.AfterFunc(300*time.Millisecond, func() { f.down.Store(false) })
	require.NoError(t, s.Put(ctx, "a", []byte("x")))
	require.Positive(t, retried.Load())
	got, err := f.Store.Get(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, "x", string(got))

	// Definite answers are not retried.
	n := f.calls.Load()
	_, err = s.Get(ctx, "missing")
	require.ErrorIs(t, err, blobstore.ErrNotFound)
	require.NoError(t, s.PutIfAbsent(ctx, "b", []byte("1")))
	require.ErrorIs(t, s.PutIfAbsent(ctx, "b", []byte("2")), blobstore.ErrExists)
	require.Equal(t, n+3, f.calls.Load())

	// A conditional put whose answer was lost: the retry finds its own
	// bytes, which is success; other bytes are still ErrExists.
	f.loseReply.Store(true)
	require.NoError(t, s.PutIfAbsent(ctx, "c", []byte("mine")))
	f.loseReply.Store(true)
	require.NoError(t, f.Store.Put(ctx, "d", []byte("theirs")))
	require.ErrorIs(t, s.PutIfAbsent(ctx, "d", []byte("mine")), blobstore.ErrExists)

	// Patience runs out: the failure is returned.
	f.down.Store(true)
	short := blobstore.Retrying(f, blobstore.RetryConfig{Patience: 100 * time.Millisecond, First: 10 * time.Millisecond})
	began := time.Now()
	require.ErrorIs(t, short.Put(ctx, "e", []byte("x")), errDown)
	require.Less(t, time.Since(began), 2*time.Second)

	// The caller's context ends the retries.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.Error(t, s.Put(cctx, "f", []byte("x")))
}

// TestRetryingConformance: the wrapper is a store like any other.
func TestRetryingConformance(t *testing.T) {
	t.Parallel()
	blobstoretest.Run(t, func(t *testing.T) blobstore.Store {
		return blobstore.Retrying(blobstore.NewMemory(), blobstore.RetryConfig{Patience: time.Second})
	})
}

// TestRetryingWaits: the waits start at First and double up to Max, with
// no jitter, while they end within patience of the first failure.
func TestRetryingWaits(t *testing.T) {
	t.Parallel()
	f := &flaky{Store: blobstore.NewMemory()}
	f.down.Store(true)
	var mu sync.Mutex
	var waits []time.Duration
	logger := slog.New(&waitRecorder{record: func(d time.Duration) { mu.Lock(); waits = append(waits, d); mu.Unlock() }})
	s := blobstore.Retrying(f, blobstore.RetryConfig{Patience: 300 * time.Millisecond, First: 10 * time.Millisecond, Max: 50 * time.Millisecond,
		Logger: logger})
	require.ErrorIs(t, s.Put(context.Background(), "a", []byte("x")), errDown)
	mu.Lock()
	defer mu.Unlock()
	want := []time.Duration{10, 20, 40, 50, 50, 50, 50}
	require.GreaterOrEqual(t, len(waits), 4, "%v", waits)
	require.LessOrEqual(t, len(waits), len(want), "%v", waits)
	var sum time.Duration
	for i, d := range waits {
		require.Equal(t, want[i]*time.Millisecond, d, "wait %d of %v", i+1, waits)
		sum += d
	}
	require.LessOrEqual(t, sum, 300*time.Millisecond, "no wait ends past patience")
}

// waitRecorder is a slog handler that records the "wait" of each line.
type waitRecorder struct{ record func(time.Duration) }

func (w *waitRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (w *waitRecorder) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "wait" {
			w.record(a.Value.Duration())
		}
		return true
	})
	return nil
}
func (w *waitRecorder) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *waitRecorder) WithGroup(string) slog.Handler      { return w }
