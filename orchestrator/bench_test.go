package orchestrator

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// BenchmarkStartFinalize measures a thread's start and end as the
// orchestrator runs them, each one compound script (start.lua: budget and
// record; finalize.lua: fenced commit, last charge, budget release,
// waiters, lease release), with the worker's claim between them, from 16
// goroutines: a root of its own (ledger register) and a child of one
// root (ledger admit). The start's asynq enqueue is part of it. It
// reports the scripts (EVAL and EVALSHA) per thread and their server
// time, from INFO commandstats.
func BenchmarkStartFinalize(b *testing.B) {
	for _, kind := range []string{"root", "child"} {
		b.Run(kind, func(b *testing.B) {
			o, r, digest := startSetup(b)
			ctx := b.Context()
			inputs := map[string]any{"city": "Lyon"}
			parent := ""
			if kind == "child" {
				root, err := o.Start(ctx, StartRequest{Directive: "test/leads", Inputs: inputs, Bundle: digest,
					LimitOverrides: thread.Limits{Spend: new(1e6), Spawns: new(1 << 30)}})
				if err != nil {
					b.Fatal(err)
				}
				parent = root.ThreadID
			}
			var seq atomic.Int64
			b.SetParallelism(max(1, 16/runtime.GOMAXPROCS(0)))
			if err := r.Client.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := seq.Add(1)
					rec, err := o.Start(ctx, StartRequest{Directive: "test/leads", Inputs: inputs, Bundle: digest, ParentID: parent})
					if err != nil {
						b.Error(err)
						return
					}
					c, err := o.acts.Claim(ctx, rec.ThreadID, "start", 0, "tok", rec.ThreadID, time.Minute)
					if err != nil {
						b.Error(err)
						return
					}
					out := Outcome{Status: thread.StatusCompleted, Result: "done", Cost: thread.Cost{Turns: 1, Spend: 0.001}, Lease: "tok",
						Transcript: &transcript.Mark{}, Charge: &Charge{Key: rec.ThreadID + ":turn:1", Amount: 0.001}}
					if err := o.Runtime().Finalize(ctx, c.Record, c.Version, out); err != nil {
						b.Errorf("finalize %d: %v", n, err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "threads/s")
			calls, usec := scriptStats(ctx, b, r.Client)
			b.ReportMetric(float64(calls)/float64(b.N), "scripts/thread")
			b.ReportMetric(float64(usec)/float64(b.N), "script-µs/thread")
		})
	}
}

// scriptStats sums the calls and server time of EVAL, EVALSHA and FCALL
// in INFO commandstats (since CONFIG RESETSTAT).
func scriptStats(ctx context.Context, b *testing.B, rdb redis.UniversalClient) (calls, usec int64) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		for _, cmd := range []string{"evalsha", "eval", "fcall"} {
			var c, u int64
			if n, _ := fmt.Sscanf(line, "cmdstat_"+cmd+":calls=%d,usec=%d", &c, &u); n == 2 {
				calls, usec = calls+c, usec+u
			}
		}
	}
	return calls, usec
}
