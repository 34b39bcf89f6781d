package worker

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/registry"
)

// BenchmarkDeltas is what the model's text costs on its way to readers:
// one op is a model call's 200 streamed pieces of 20 bytes handed to the
// feed (what the provider's goroutine pays) and, when the feed publishes,
// published to real Redis (stop waits until every piece is out). off: no
// one follows, nothing is published (the default); on: published, with
// no reader subscribed, and with 100 readers subscribed to the channel.
func BenchmarkDeltas(b *testing.B) {
	r := testenv.NewRedis(b)
	ks := keyspace.New(r.Namespace)
	reg, err := registry.New(registry.Config{Client: r.Client, Keys: ks})
	require.NoError(b, err)
	piece := strings.Repeat("w", 20)
	const pieces = 200
	run := func(b *testing.B, id string, on bool) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			d := newDeltaFeed(func(ctx context.Context, raws [][]byte) error { return reg.PublishDeltas(ctx, id, raws) }, slog.Default())
			d.call(1, 0)
			if on {
				d.follow()
			}
			for j := 0; j < pieces; j++ {
				d.add(piece)
			}
			d.stop()
		}
	}
	b.Run("off", func(b *testing.B) { run(b, "bench-off", false) })
	b.Run("on/no-readers", func(b *testing.B) { run(b, "bench-none", true) })
	b.Run("on/100-readers", func(b *testing.B) {
		id := "bench-many"
		ctx := context.Background()
		got := make(chan int, 100)
		for i := 0; i < 100; i++ {
			ps, err := reg.Deltas(ctx, id)
			require.NoError(b, err)
			b.Cleanup(func() { _ = ps.Close() })
			go func() {
				n := 0
				for range ps.Channel() {
					n++
				}
				got <- n
			}()
		}
		run(b, id, true)
	})
}
