package registry

import (
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"

	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/thread"
)

// BenchmarkListing measures a page of 100 of the listings `thread list`
// and GET /v1/threads make, on a registry of SPOOL_BENCH_LIST_RUNS runs
// (default 100,000; docs/design.md quotes 1,000,000): every run tagged
// batch=b<i%10>, one in a thousand customer=rare.
//
//   - newest: the first page of every run (the threads index);
//   - tag-common: a page of batch=b3 (a tenth of the runs), past a cursor
//     in its middle;
//   - tag-rare: every run of customer=rare (a thousandth), in pages of
//     100 until the end;
//   - tag-two: customer=rare and batch=b3 (the first tag's index, the
//     second checked on the records);
//   - directive-rare: every run of a directive a thousandth of the runs
//     have, from its index (the backfill has run), in pages of 100.
func BenchmarkListing(b *testing.B) {
	n := 100000
	if v, err := strconv.Atoi(os.Getenv("SPOOL_BENCH_LIST_RUNS")); err == nil && v > 0 {
		n = v
	}
	f := setupRegistry(b)
	rdb := autopipe.Wrap(f.r.Client)
	reg, err := New(Config{Client: rdb, Keys: f.ks})
	if err != nil {
		b.Fatal(err)
	}
	ctx := b.Context()
	var wg sync.WaitGroup
	const workers = 64
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				tags := map[string]string{"batch": "b" + strconv.Itoa(i%10)}
				d := "bench/d"
				if i%1000 == 7 {
					tags["customer"] = "rare"
					d = "bench/rare"
				}
				if _, err := reg.Register(ctx, NewThread{ThreadID: fmt.Sprintf("r%07d", i), Directive: d, Limits: thread.DefaultLimits(), Tags: tags}); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	for {
		_, done, err := reg.BackfillDirectiveIndex(ctx, 5000)
		if err != nil {
			b.Fatal(err)
		}
		if done {
			break
		}
	}
	mid, err := reg.List(ctx, Filter{Tags: map[string]string{"batch": "b3"}, Limit: n / 20})
	if err != nil || len(mid) == 0 {
		b.Fatal(err, len(mid))
	}
	cur := CursorOf(mid[len(mid)-1])
	cases := []struct {
		name string
		f    Filter
		all  bool // page on to the end
	}{
		{"newest", Filter{Limit: 100}, false},
		{"tag-common", Filter{Tags: map[string]string{"batch": "b3"}, After: &cur, Limit: 100}, false},
		{"tag-rare", Filter{Tags: map[string]string{"customer": "rare"}, Limit: 100}, true},
		{"tag-two", Filter{Tags: map[string]string{"customer": "rare", "batch": "b7"}, Limit: 100}, true},
		{"directive-rare", Filter{Directive: "bench/rare", Limit: 100}, true},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			listed := 0
			for b.Loop() {
				f := c.f
				for {
					recs, err := reg.List(ctx, f)
					if err != nil {
						b.Fatal(err)
					}
					listed += len(recs)
					if !c.all || len(recs) < f.Limit {
						break
					}
					next := CursorOf(recs[len(recs)-1])
					f.After = &next
				}
			}
			b.ReportMetric(float64(listed)/float64(b.N), "runs/op")
		})
	}
}
