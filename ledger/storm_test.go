package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStorm runs 240 goroutines, one per thread of a random tree, each
// reserving from its parent, charging (with retried keys and overruns) and
// releasing at a random moment (often before its own children), against
// real Redis. A checker reads every entry throughout. Afterwards: no entry
// ever had actual + reserved > max, and once everything has released the
// root holds exactly the sum of the accepted charges with nothing reserved.
func TestStorm(t *testing.T) {
	t.Parallel()
	f := setup(t)
	const n = 240
	rng := rand.New(rand.NewPCG(1, 2))
	parent := make([]int, n)
	path := make([][]string, n) // ancestors, parent first
	for i := 1; i < n; i++ {
		parent[i] = rng.IntN(i)
		if rng.IntN(3) == 0 { // keep some depth
			parent[i] = i - 1
		}
		path[i] = append([]string{id(parent[i])}, path[parent[i]]...)
	}
	if err := f.l.Register(f.ctx, id(0), 4); err != nil {
		t.Fatal(err)
	}

	ready := make([]chan struct{}, n)
	ok := make([]atomic.Bool, n)
	for i := range ready {
		ready[i] = make(chan struct{})
	}
	var accepted [n]int64 // nano, per thread, written by its own goroutine
	var refused, overruns atomic.Int64
	var wg sync.WaitGroup
	errc := make(chan error, 20*n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			me := id(i)
			if i > 0 {
				<-ready[parent[i]]
				defer func() { // check the parent once more as this thread ends
					if e, err := f.l.Get(f.ctx, id(parent[i])); err == nil && e.ActualNano+e.ReservedNano > e.MaxNano {
						errc <- fmt.Errorf("invariant broken at %s: %+v", e.ThreadID, e)
					}
				}()
				if !ok[parent[i]].Load() {
					close(ready[i])
					return
				}
				err := f.l.Reserve(f.ctx, me, id(parent[i]), float64(r.IntN(100)+5)/100)
				if err != nil {
					if !errors.Is(err, ErrInsufficientBudget) && !errors.Is(err, ErrReleased) {
						errc <- err
					}
					refused.Add(1)
					close(ready[i])
					return
				}
			}
			ok[i].Store(true)
			close(ready[i])
			releaseEarly := r.IntN(2) == 0
			var own int64
			for turn := range r.IntN(6) + 1 {
				key := fmt.Sprintf("%s:%d", me, turn)
				amt := float64(r.IntN(40)+1) / 100
				for range 1 + r.IntN(2) { // sometimes retried
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
				runtime.Gosched()
			}
			if !releaseEarly {
				time.Sleep(time.Duration(r.IntN(3)) * time.Millisecond)
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
				return
			}
			rounds++
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
	t.Logf("storm: %d threads, %d refused reservations, %d overrun charges, root spent %g of %g, %d checker rounds",
		n, refused.Load(), overruns.Load(), root.Actual, root.Max, rounds)
}

func id(i int) string { return fmt.Sprintf("s%d", i) }

// checkAll reads every entry (each HMGET is atomic) and checks the
// invariant.
func checkAll(f fixture, n int) error {
	ctx := context.Background()
	for i := range n {
		e, err := f.l.Get(ctx, id(i))
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return err
		}
		if e.ActualNano > e.MaxNano || e.ActualNano+e.ReservedNano > e.MaxNano || e.ReservedNano < 0 || e.ActualNano < 0 {
			return fmt.Errorf("invariant broken at %s: %+v", id(i), e)
		}
	}
	return nil
}
