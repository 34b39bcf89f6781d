package registry

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/thread"
)

// benchClients is how many goroutines run operations at once, as
// redis-benchmark's default 50 clients (ledger's benchmarks do the same).
const benchClients = 50

// BenchmarkRegistryOps measures the registry operations a thread's life
// runs, each one EVALSHA, from ~50 goroutines on the auto-pipelined
// client the orchestrator gives the registry:
//
//   - register: Register of a new root;
//   - claim: Activations.Claim of a created thread (the worker's claim);
//   - admitted-claim: the same claim of an admitted activation
//     (ClaimAdmitted: it also notes its admission id and the spend);
//   - commit: Commit of a cost snapshot at the version held (a turn's
//     fence).
func BenchmarkRegistryOps(b *testing.B) {
	for _, op := range []string{"register", "claim", "admitted-claim", "commit"} {
		b.Run(op, func(b *testing.B) {
			f := setupRegistry(b)
			rdb := autopipe.Wrap(f.r.Client)
			reg, err := New(Config{Client: rdb, Keys: f.ks})
			if err != nil {
				b.Fatal(err)
			}
			acts := NewActivations(rdb, f.ks, nil)
			ctx := b.Context()
			var seq atomic.Int64
			b.SetParallelism(max(1, benchClients/runtime.GOMAXPROCS(0)))
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				// Each goroutine commits to a thread of its own.
				own := fmt.Sprintf("own%d", seq.Add(1))
				var v int64
				if op != "register" {
					if _, err := reg.Register(ctx, NewThread{ThreadID: own, Directive: "bench/d", Limits: thread.DefaultLimits()}); err != nil {
						b.Error(err)
						return
					}
					c, err := acts.Claim(ctx, own, "start", 0, "tok", own, time.Minute)
					if err != nil {
						b.Error(err)
						return
					}
					v = c.Version
				}
				for pb.Next() {
					n := seq.Add(1)
					switch op {
					case "register":
						if _, err := reg.Register(ctx, NewThread{ThreadID: fmt.Sprintf("r%d", n), Directive: "bench/d", Limits: thread.DefaultLimits()}); err != nil {
							b.Error(err)
							return
						}
					case "claim", "admitted-claim":
						// A claim needs a created thread: the registration
						// is part of the op (run "register" to subtract it).
						id := fmt.Sprintf("c%d", n)
						if _, err := reg.Register(ctx, NewThread{ThreadID: id, Directive: "bench/d", Limits: thread.DefaultLimits()}); err != nil {
							b.Error(err)
							return
						}
						act := ""
						if op == "admitted-claim" {
							act = id
						}
						if _, err := acts.ClaimAdmitted(ctx, id, "start", 0, "tok", id, time.Minute, act); err != nil {
							b.Error(err)
							return
						}
					case "commit":
						cost := thread.Cost{Turns: int(n), Spend: 0.001}
						nv, err := reg.Commit(ctx, own, v, Changes{Cost: &cost})
						if err != nil {
							b.Error(err)
							return
						}
						v = nv
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
		})
	}
}
