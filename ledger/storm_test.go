package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/stack"
)

// TestStorm runs storms of 240 goroutines, one per thread of a random tree,
// each reserving from its parent, charging (with retried keys and overruns)
// and releasing at a random moment (often before its own children), against
// real Redis. A checker reads every entry throughout. Afterwards: no entry
// ever had actual + reserved > max, and once everything has released the
// root holds exactly the sum of the accepted charges with nothing reserved.
// Storms run on a plain pooled client and on the auto-pipeliner spool's
// orchestrator uses, with a roomy root budget and with a tight one (most
// reservations refused, most charges clamped).
func TestStorm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		seed   uint64
		budget float64
		ap     bool
	}{
		{"plain/roomy", 1, 4, false},
		{"plain/tight", 2, 0.6, false},
		{"autopipeline/roomy", 3, 4, true},
		{"autopipeline/tight", 4, 0.6, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			if tc.ap {
				f.l = New(stack.AutoPipelined(f.r.Client), keyspace.New(f.r.Namespace))
			}
			storm(t, f, tc.seed, tc.budget)
		})
	}
}

func storm(t *testing.T, f fixture, seed uint64, budget float64) {
	const n = 240
	rng := rand.New(rand.NewPCG(seed, 2))
	parent := make([]int, n)
	path := make([][]string, n) // ancestors, parent first
	const rootKids = 20         // first-level threads, competing for the root
	for i := 1; i < n; i++ {
		parent[i] = rng.IntN(i)
		if rng.IntN(3) == 0 { // keep some depth
			parent[i] = i - 1
		}
		if i <= rootKids {
			parent[i] = 0
		}
		path[i] = append([]string{id(parent[i])}, path[parent[i]]...)
	}
	// Each thread asks its parent for a share of what the parent itself
	// got, 2-12%: siblings compete, most fit. With a tight budget the
	// root's 20 children ask for 5-15% each, twice what the root has in
	// all: about half of them do not fit. Amounts are in whole nano-USD.
	want := make([]float64, n)
	want[0] = budget
	for i := 1; i < n; i++ {
		share := 0.02 + 0.1*rng.Float64()
		if budget < 1 && parent[i] == 0 {
			share = 0.05 + 0.1*rng.Float64()
		}
		want[i] = math.Round(want[parent[i]]*share*1e9) / 1e9
	}
	if err := f.l.Register(f.ctx, id(0), budget); err != nil {
		t.Fatal(err)
	}

	// tried[i] counts down as i's children attempt their reservation;
	// finished[i] as they release. A thread releases after its children
	// tried (else a refused Reserve would only say "released"), and then
	// either at once (a third of them: children still running under a
	// released parent) or after its children finished.
	ready := make([]chan struct{}, n)
	ok := make([]atomic.Bool, n)
	tried := make([]sync.WaitGroup, n)
	finished := make([]sync.WaitGroup, n)
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	for i := 1; i < n; i++ {
		tried[parent[i]].Add(1)
		finished[parent[i]].Add(1)
	}
	var accepted [n]int64 // nano, per thread, written by its own goroutine
	var refused, skipped, overruns atomic.Int64
	watched := make(chan struct{})
	watchedOnce := sync.OnceFunc(func() { close(watched) })
	var wg sync.WaitGroup
	errc := make(chan error, 20*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), seed))
			me := id(i)
			if i > 0 {
				p := parent[i]
				defer finished[p].Done()
				<-ready[p]
				defer func() { // check the parent once more as this thread ends
					if e, err := f.l.Get(f.ctx, id(p)); err == nil && e.ActualNano+e.ReservedNano > e.MaxNano {
						errc <- fmt.Errorf("invariant broken at %s: %+v", e.ThreadID, e)
					}
				}()
				if !ok[p].Load() {
					skipped.Add(1) // its parent never got a budget
					tried[p].Done()
					close(ready[i])
					return
				}
				err := f.l.Reserve(f.ctx, me, id(p), want[i])
				tried[p].Done()
				if err != nil {
					if !errors.Is(err, ErrInsufficientBudget) {
						errc <- err
					}
					refused.Add(1)
					close(ready[i])
					return
				}
			}
			ok[i].Store(true)
			close(ready[i])
			var own int64
			for turn := range r.IntN(10) + 1 {
				key := fmt.Sprintf("%s:%d", me, turn)
				amt := math.Round(want[i]*(0.02+0.25*r.Float64())*1e9) / 1e9 // sometimes more than is left
				for range 1 + r.IntN(2) {                                    // sometimes retried
					e, err := f.l.Charge(f.ctx, me, key, amt)
					if err != nil && !errors.Is(err, spendExceeded) {
						errc <- err
						return
					}
					if err != nil {
						overruns.Add(1)
					}
					if e.ActualNano+e.ReservedNano > e.MaxNano {
						errc <- fmt.Errorf("invariant broken at %s after charge: %+v", me, e)
					}
					accepted[i] += e.OwnNano - own
					own = e.OwnNano
				}
				if r.IntN(2) == 0 {
					time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
				} else {
					runtime.Gosched()
				}
			}
			tried[i].Wait()
			if r.IntN(3) != 0 {
				finished[i].Wait()
			}
			if i == 0 {
				<-watched // the root stays open until the checker has made two passes
			}
			if err := f.l.Release(f.ctx, me, path[i], "completed"); err != nil {
				errc <- err
			}
		}()
	}

	done := make(chan struct{})
	checked := make(chan int)
	go func() {
		rounds := 0
		defer func() { checked <- rounds }()
		for {
			if err := checkAll(f, n); err != nil {
				errc <- err
				watchedOnce()
				return
			}
			rounds++
			if rounds == 2 {
				watchedOnce()
			}
			select {
			case <-done:
				return
			default:
			}
		}
	}()
	wg.Wait()
	close(done)
	rounds := <-checked
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	if err := checkAll(f, n); err != nil {
		t.Fatal(err)
	}
	var sum int64
	for i := range n {
		sum += accepted[i]
		if !ok[i].Load() {
			continue
		}
		e, err := f.l.Get(f.ctx, id(i))
		if err != nil {
			t.Fatal(err)
		}
		if e.OwnNano != accepted[i] {
			t.Errorf("%s: own %d, accepted charges %d", id(i), e.OwnNano, accepted[i])
		}
		if e.Status != "completed" {
			t.Errorf("%s: status %s", id(i), e.Status)
		}
	}
	root, err := f.l.Get(f.ctx, id(0))
	if err != nil {
		t.Fatal(err)
	}
	if root.ActualNano != sum || root.ReservedNano != 0 {
		t.Fatalf("root actual %d reserved %d, want actual %d reserved 0", root.ActualNano, root.ReservedNano, sum)
	}
	t.Logf("storm: %d threads, %d refused reservations, %d never started (parent refused), %d overrun charges, root spent %g of %g, %d checker rounds",
		n, refused.Load(), skipped.Load(), overruns.Load(), root.Actual, root.Max, rounds)
	if budget < 1 && (refused.Load() == 0 || overruns.Load() == 0) {
		t.Errorf("a tight budget refused %d reservations and clamped %d charges: the storm did not press on the budget",
			refused.Load(), overruns.Load())
	}
}

func id(i int) string { return fmt.Sprintf("s%d", i) }

// checkAll reads every entry (each HMGET is atomic), 16 at a time, and
// checks the invariant.
func checkAll(f fixture, n int) error {
	ctx := context.Background()
	var g errgroup.Group
	g.SetLimit(16)
	for i := range n {
		g.Go(func() error {
			e, err := f.l.Get(ctx, id(i))
			if errors.Is(err, ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			if e.ActualNano > e.MaxNano || e.ActualNano+e.ReservedNano > e.MaxNano || e.ReservedNano < 0 || e.ActualNano < 0 {
				return fmt.Errorf("invariant broken at %s: %+v", id(i), e)
			}
			return nil
		})
	}
	return g.Wait()
}
