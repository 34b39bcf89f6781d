package ledger

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
)

// BenchmarkCycle measures one child's full ledger life: Reserve + Charge +
// Release (three EVALSHA round trips), from ~50 goroutines on one client
// (pool 64). Compare cycles/s with redis-benchmark's raw EVAL ops/s on the
// same server (BENCHMARKS.md).
func BenchmarkCycle(b *testing.B) {
	f := setup(b)
	if err := f.l.Register(f.ctx, "root", MaxAmount); err != nil {
		b.Fatal(err)
	}
	anc := []string{"root"}
	var seq atomic.Int64
	b.SetParallelism(max(1, 50/maxprocs()))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			child := fmt.Sprintf("c%d", seq.Add(1))
			if err := f.l.Reserve(f.ctx, child, "root", 0.01); err != nil {
				b.Error(err)
				return
			}
			if _, err := f.l.Charge(f.ctx, child, child+":1", 0.004); err != nil {
				b.Error(err)
				return
			}
			if err := f.l.Release(f.ctx, child, anc, "completed"); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "cycles/s")
}

func maxprocs() int { return runtime.GOMAXPROCS(0) }
