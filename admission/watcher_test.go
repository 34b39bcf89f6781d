package admission

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/queue"
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

// TestNewcomerMakesRoomAtOnce (P1): a tenant turning active lowers the
// shares of the tenants the balancer's last pass knew to what they would
// be beside it, in its first request, so they stop granting their own
// next activations before the pass it woke (here: no pass at all). A
// share already at or below that, and a newcomer the pass knew, change
// nothing.
func TestNewcomerMakesRoomAtOnce(t *testing.T) {
	t.Parallel()
	r := testenv.NewRedis(t)
	ks := keyspace.New(r.Namespace)
	ctx := context.Background()
	pol, err := Parse("admission.yaml", []byte("version: 1\ntenants:\n  a: {weight: 1}\n  b: {weight: 1}\n  c: {weight: 2}\n"))
	require.NoError(t, err)
	_, _, err = Publish(ctx, r.Client, ks, pol, "admission.yaml", time.Now())
	require.NoError(t, err)
	w := NewWatcher(r.Client, ks, quietLog())
	require.NoError(t, w.Refresh(ctx))
	cl := asynq.NewClientFromRedisClient(r.Client)
	adm := New(Config{Redis: r.Client, Keys: ks, Policy: w, Enqueuer: &queue.Enqueuer{Client: cl, Keys: ks}, Logger: quietLog()})
	t.Cleanup(func() {
		var keys []string
		for _, tn := range []string{"a", "b", "c"} {
			keys = append(keys, ks.AdmTenantKeys(tn)...)
		}
		r.Client.Del(context.Background(), append(keys, ks.AdmPolicy(), ks.AdmBalance(), ks.AdmTenants())...)
	})
	share := func(tenant string) string { return r.Client.HGet(ctx, ks.AdmTenantKeys(tenant)[2], "share").Val() }

	// The last pass: a alone on 16 slots, c known with a share of 4.
	require.NoError(t, r.Client.HSet(ctx, ks.AdmBalance(), "capacity", 16, "weights", `{"a":1,"c":2}`,
		"shares", `{"a":12,"c":4}`, "at", time.Now().UnixMilli()).Err())
	for tn, s := range map[string]int{"a": 12, "c": 4} {
		_, err := adm.Pump(ctx, tn, PumpArgs{Share: &s})
		require.NoError(t, err)
	}
	before := r.Client.HGet(ctx, ks.AdmTenantKeys("a")[2], "share_at").Val()

	d, err := adm.Request(ctx, Request{Act: "b/1#1", Tenant: "b", Run: "b/1", Queue: "default", Class: 1, Reason: "start", Seq: 1})
	require.NoError(t, err)
	require.True(t, d.Activated && d.Granted, "%+v", d)
	require.Equal(t, "4", share("a"), "a's 12 lowered to ⌊16·1/(1+2+1)⌋ at b's first request")
	require.Equal(t, "4", share("c"), "c's 4 is already below ⌊16·2/4⌋ = 8")
	require.Equal(t, before, r.Client.HGet(ctx, ks.AdmTenantKeys("a")[2], "share_at").Val(),
		"a lowered share keeps its time: it is not fresher than the pass that wrote it")

	// A tenant the pass knew lowers nobody.
	require.NoError(t, r.Client.HSet(ctx, ks.AdmTenantKeys("a")[2], "share", 12).Err())
	require.NoError(t, r.Client.HSet(ctx, ks.AdmBalance(), "weights", `{"a":1,"b":1}`).Err())
	adm.bal.mu.Lock()
	adm.bal.read = time.Time{}
	adm.bal.mu.Unlock()
	require.NoError(t, r.Client.Del(ctx, ks.AdmTenantKeys("b")...).Err())
	d, err = adm.Request(ctx, Request{Act: "b/2#1", Tenant: "b", Run: "b/2", Queue: "default", Class: 1, Reason: "start", Seq: 1})
	require.NoError(t, err)
	require.True(t, d.Activated, "%+v", d)
	require.Equal(t, "12", share("a"))
}
