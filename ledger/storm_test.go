package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/autopipe"
	"github.com/spool-run/spool/keyspace"
)

// TestStorm runs 200 goroutines charging across a three-level tree of 30
// entries (a root, 4 children, 25 grandchildren; admitted ones with their
// parent's whole limit, and guaranteed ones) with tight ceilings, while
// other goroutines admit, reserve and release short-lived leaves under
// them, against real Redis. A watcher reads every entry continuously, in
// one MULTI/EXEC so it sees one consistent moment, and checks at every
// read that no level is over its ceiling (actual + reserved ≤ max), that
// every level's actual is its own spend plus its children's, and that no
// amount is negative. Afterwards everything is released and the root
// holds exactly the sum of every entry's own spend, with nothing reserved.
// Storms run on a plain pooled client and on the auto-pipeliner spool's
// orchestrator uses, roomy and tight.
func TestStorm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		seed   uint64
		budget float64
		ap     bool
	}{
		{"plain/tight", 1, 0.5, false},
		{"plain/roomy", 2, 50, false},
		{"autopipeline/tight", 3, 0.5, true},
		{"autopipeline/roomy", 4, 50, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			if tc.ap {
				f.l = New(autopipe.Wrap(f.r.Client), keyspace.New(f.r.Namespace))
			}
			storm(t, f, tc.seed, tc.budget)
		})
	}
}

// stormTree is the storm's tree: entry ids, parents (-1 for the root) and
// paths (ancestors, parent first).
type stormTree struct {
	ids    []string
	parent []int
	path   [][]string
}

func (st *stormTree) add(id string, parent int) int {
	st.ids = append(st.ids, id)
	st.parent = append(st.parent, parent)
	var p []string
	if parent >= 0 {
		p = append([]string{st.ids[parent]}, st.path[parent]...)
	}
	st.path = append(st.path, p)
	return len(st.ids) - 1
}

func storm(t *testing.T, f fixture, seed uint64, budget float64) {
	st := &stormTree{}
	root := st.add("root", -1)
	f.must(t, f.l.Register(f.ctx, "root", budget))
	// Level 1: 4 children; the first is guaranteed a quarter of the root.
	var mids []int
	for i := range 4 {
		m := st.add(fmt.Sprintf("m%d", i), root)
		if i == 0 {
			f.must(t, f.l.Reserve(f.ctx, st.ids[m], st.path[m], budget/4))
		} else {
			_, err := f.l.Admit(f.ctx, st.ids[m], st.path[m], budget, false)
			f.must(t, err)
		}
		mids = append(mids, m)
	}
	// Level 2: 25 grandchildren; one in five guaranteed a tenth of its
	// parent's ceiling (when it fits), the rest admitted with the whole.
	for i := range 25 {
		p := mids[i%len(mids)]
		l := st.add(fmt.Sprintf("l%d", i), p)
		if i%5 == 0 {
			if err := f.l.Reserve(f.ctx, st.ids[l], st.path[l], budget/40); err == nil {
				continue
			}
		}
		_, err := f.l.Admit(f.ctx, st.ids[l], st.path[l], budget, false)
		f.must(t, err)
	}
	tree := len(st.ids) // the 30 fixed entries; leaves come and go below
	require.Equal(t, 30, tree, "tree of")

	fixedIDs, fixedPaths := append([]string(nil), st.ids...), append([][]string(nil), st.path...)

	ctx, stop := context.WithCancel(f.ctx)
	defer stop()
	var mu sync.Mutex // guards st while leaves are added
	snapshot := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), st.ids...)
	}

	// The watcher.
	var reads atomic.Int64
	watchErr := make(chan error, 1)
	go func() {
		defer close(watchErr)
		for ctx.Err() == nil {
			// Under mu: a leaf is added to the tree and created in
			// Redis under mu too, so every entry the read finds is in ids.
			mu.Lock()
			err := checkTree(f.ctx, f, st.ids)
			mu.Unlock()
			if err != nil {
				watchErr <- err
				stop()
				return
			}
			reads.Add(1)
		}
	}()

	var wg sync.WaitGroup
	errc := make(chan error, 1000)
	// crowd starts n goroutines, each with its own random source (seeded
	// from seed, g+stream), that take rounds steps while the storm lasts;
	// a step's error ends its goroutine and fails the storm.
	crowd := func(n int, stream uint64, rounds int, step func(r *rand.Rand, g, k int) error) {
		for g := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rand.New(rand.NewPCG(seed, uint64(g)+stream))
				for k := range rounds {
					if ctx.Err() != nil {
						return
					}
					if err := step(r, g, k); err != nil {
						errc <- err
						return
					}
				}
			}()
		}
	}

	// 200 chargers, 25 charges each, one in ten a retry of an earlier key:
	// amounts up to 0.1% of the budget in a tight storm (2.5 times the
	// budget in all: the ceilings are reached early), up to 0.02% in a
	// roomy one (half the budget: only the small guaranteed leaves fill).
	frac := 0.0002
	if budget < 1 {
		frac = 0.001
	}
	var charged, clamped atomic.Int64
	crowd(200, 100, 25, func(r *rand.Rand, g, k int) error {
		i := r.IntN(tree)
		key := fmt.Sprintf("g%d:%d", g, k)
		if k > 0 && r.IntN(10) == 0 {
			key = fmt.Sprintf("g%d:%d", g, r.IntN(k))
		}
		amt := float64(r.IntN(int(budget*frac*1e9))+1) / 1e9
		_, err := f.l.Charge(f.ctx, fixedIDs[i], fixedPaths[i], key, amt)
		switch {
		case err == nil:
			charged.Add(1)
		case errors.Is(err, spendExceeded):
			clamped.Add(1)
		default:
			return fmt.Errorf("charge %s: %w", fixedIDs[i], err)
		}
		return nil
	})
	// 10 goroutines that admit or reserve leaves under random entries,
	// charge them and release them.
	var leaves, refused atomic.Int64
	crowd(10, 1000, 15, func(r *rand.Rand, g, k int) error {
		p := r.IntN(tree)
		mu.Lock()
		x := st.add(fmt.Sprintf("x%d.%d", g, k), p)
		id, path := st.ids[x], st.path[x]
		var err error
		if r.IntN(2) == 0 {
			err = f.l.Reserve(f.ctx, id, path, budget/100)
		} else {
			_, err = f.l.Admit(f.ctx, id, path, budget, false)
		}
		if errors.Is(err, ErrInsufficientBudget) {
			st.ids[x] = "" // never created
		}
		mu.Unlock()
		if errors.Is(err, ErrInsufficientBudget) {
			refused.Add(1)
			return nil
		}
		if err != nil {
			return fmt.Errorf("leaf %s: %w", id, err)
		}
		leaves.Add(1)
		for c := range 3 {
			if _, err := f.l.Charge(f.ctx, id, path, fmt.Sprint(c), budget/3000); err != nil && !errors.Is(err, spendExceeded) {
				return fmt.Errorf("leaf charge %s: %w", id, err)
			}
		}
		if err := f.l.Release(f.ctx, id, path, "completed"); err != nil {
			return fmt.Errorf("leaf release %s: %w", id, err)
		}
		return nil
	})
	wg.Wait()
	// Let the watcher read the final state at least twice.
	for n := reads.Load(); reads.Load() < n+2 && ctx.Err() == nil; {
		time.Sleep(time.Millisecond)
	}
	stop()
	require.NoError(t, <-watchErr)
	close(errc)
	for err := range errc {
		t.Fatal(err)
	}

	// Release everything, leaves first, and check the end state.
	ids := snapshot()
	for i := len(ids) - 1; i >= 0; i-- {
		if ids[i] == "" {
			continue
		}
		f.must(t, f.l.Release(f.ctx, ids[i], st.path[i], "completed"))
		require.NoError(t, checkTree(f.ctx, f, ids), "after releasing %s", ids[i])
	}
	all, err := f.l.GetMany(f.ctx, ids)
	f.must(t, err)
	var own int64
	for _, e := range all {
		own += e.OwnNano
	}
	rootE := all["root"]
	require.Equal(t, own, rootE.ActualNano, "end: root actual %d reserved %d, want actual %d (sum of own) and nothing reserved", rootE.ActualNano, rootE.ReservedNano, own)
	require.EqualValues(t, 0, rootE.ReservedNano, "end: root actual %d reserved %d, want actual %d (sum of own) and nothing reserved", rootE.ActualNano, rootE.ReservedNano, own)
	t.Logf("%d charges accepted, %d clamped; %d leaves, %d refused; %d consistent reads; root spent %g of %g",
		charged.Load(), clamped.Load(), leaves.Load(), refused.Load(), reads.Load(), rootE.Actual, rootE.Max)
	if budget < 1 && (clamped.Load() == 0 || rootE.ActualNano != rootE.MaxNano) {
		t.Fatalf("a tight storm clamped %d charges and spent %d of %d: it did not reach the ceiling", clamped.Load(), rootE.ActualNano, rootE.MaxNano)
	}
	require.GreaterOrEqual(t, reads.Load(), int64(3), "the watcher read the tree only")
}

// checkTree reads every entry of ids in one MULTI/EXEC and checks the
// ledger's invariants over that one moment.
func checkTree(ctx context.Context, f fixture, ids []string) error {
	ks := keyspace.New(f.r.Namespace)
	var cmds []*redis.SliceCmd
	_, err := f.r.Client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			if id != "" {
				cmds = append(cmds, p.HMGet(ctx, ks.Ledger(id), entryFields...))
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	entries := map[string]Entry{}
	sub := map[string]int64{}
	j := 0
	for _, id := range ids {
		if id == "" {
			continue
		}
		vals := cmds[j].Val()
		j++
		if vals[1] == nil {
			continue // a leaf not created yet
		}
		e, err := parseEntry(id, vals)
		if err != nil {
			return err
		}
		entries[id] = e
		sub[e.ParentID] += e.ActualNano
	}
	for id, e := range entries {
		if e.ActualNano < 0 || e.ReservedNano < 0 || e.OwnNano < 0 || e.OverrunNano < 0 {
			return fmt.Errorf("%s: negative amount %+v", id, e)
		}
		if e.ActualNano+e.ReservedNano > e.MaxNano {
			return fmt.Errorf("%s over its ceiling: actual %d + reserved %d > max %d", id, e.ActualNano, e.ReservedNano, e.MaxNano)
		}
		if e.ActualNano != e.OwnNano+sub[id] {
			return fmt.Errorf("%s: actual %d, but own %d + children's %d", id, e.ActualNano, e.OwnNano, sub[id])
		}
	}
	return nil
}
