package admission

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
)

// TestWatcherFirstRead (I1): a process whose first read of the policy is
// under way (its watcher's Run started it) or failed does not take
// admission for off. Current waits for the read under way; Ready
// reports a failed one, and the next call reads again.
func TestWatcherFirstRead(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ks := keyspace.New(r.Namespace)
	ctx := context.Background()
	pol, err := Parse("admission.yaml", []byte("version: 1\nconcurrency:\n  - {name: k, directives: ['*'], key: '${name}', max: 1}\n"))
	require.NoError(t, err)
	_, _, err = Publish(ctx, r.Client, ks, pol, "admission.yaml", time.Now())
	require.NoError(t, err)
	t.Cleanup(func() { r.Client.Del(context.Background(), ks.AdmPolicy()) })

	for i := range 200 {
		w := NewWatcher(r.Client, ks, quietLog())
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = w.Refresh(ctx)
		}()
		runtime.Gosched()
		require.NotNil(t, w.Current(), "read %d: the policy taken for off while its first read was under way", i)
		<-done
	}

	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	w := NewWatcher(down, ks, quietLog())
	require.Error(t, w.Ready(ctx), "a read that failed is not a policy read")
	require.Error(t, w.Ready(ctx), "and the next call reads again")
}

func quietLog() *slog.Logger { return slog.New(slog.DiscardHandler) }
