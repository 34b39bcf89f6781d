package ledger

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/keyspace"
)

// BenchmarkCycle measures one child's full ledger life: Admit + Charge +
// Release (three EVALSHA commands, one each) of a child of the root, from
// ~50 goroutines. Compare cycles/s with redis-benchmark's raw EVAL ops/s
// on the same server (BENCHMARKS.md).
//
//   - autopipeline: the client spool's orchestrator gives the ledger
//     (autopipe.Wrap: go-redis's blocking auto-pipeliner, full
//     duplex: concurrent callers' commands share writes and reads on one
//     connection; each operation is still its own EVALSHA with its own
//     reply).
//   - plain: a pooled client, one connection per command in flight.
func BenchmarkCycle(b *testing.B) {
	b.Run("autopipeline", func(b *testing.B) {
		f := setup(b)
		benchCycle(b, New(autopipe.Wrap(f.r.Client), keyspace.New(f.r.Namespace)))
	})
	b.Run("plain", func(b *testing.B) {
		f := setup(b)
		benchCycle(b, f.l)
	})
}

func benchCycle(b *testing.B, l *Ledger) {
	ctx := b.Context()
	require.NoError(b, l.Register(ctx, "root", MaxAmount))
	path := []string{"root"}
	var seq atomic.Int64
	b.SetParallelism(max(1, benchClients/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			child := fmt.Sprintf("c%d", seq.Add(1))
			if _, err := l.Admit(ctx, child, path, 0.01, false); err != nil {
				b.Error(err)
				return
			}
			if _, err := l.Charge(ctx, child, path, child+":1", 0.004); err != nil {
				b.Error(err)
				return
			}
			if err := l.Release(ctx, child, path, "completed"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

// BenchmarkChargeDepth3 measures a turn's charge of a thread three levels
// below the root (four entries on its path: the thread, its parent, its
// grandparent, the root), all admitted, from ~50 goroutines on the
// auto-pipelined client: the cost of charging the whole path at once.
// Compare charges/s with redis-benchmark's raw EVAL (BENCHMARKS.md).
func BenchmarkChargeDepth3(b *testing.B) {
	f := setup(b)
	l := New(autopipe.Wrap(f.r.Client), keyspace.New(f.r.Namespace))
	ctx := b.Context()
	require.NoError(b, l.Register(ctx, "root", MaxAmount))
	path := []string{"root"}
	for _, id := range []string{"a", "b"} {
		_, err := l.Admit(ctx, id, path, MaxAmount, false)
		require.NoError(b, err)
		path = append([]string{id}, path...)
	}
	const leaves = 64
	for i := range leaves {
		_, err := l.Admit(ctx, fmt.Sprintf("t%d", i), path, MaxAmount, false)
		require.NoError(b, err)
	}
	var seq atomic.Int64
	b.SetParallelism(max(1, benchClients/runtime.GOMAXPROCS(0)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := seq.Add(1)
			leaf := fmt.Sprintf("t%d", n%leaves)
			if _, err := l.Charge(ctx, leaf, path, fmt.Sprintf("k%d", n), 0.000001); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "charges/s")
}

// benchClients is how many goroutines run cycles at once, as
// redis-benchmark's default 50 clients.
const benchClients = 50
