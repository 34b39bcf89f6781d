package ledger

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/thread"
)

type fixture struct {
	ctx context.Context
	l   *Ledger
	r   *testenv.Redis
}

func setup(t testing.TB) fixture {
	t.Helper()
	r := testenv.NewRedis(t)
	return fixture{ctx: context.Background(), l: New(r.Client, keyspace.New(r.Namespace)), r: r}
}

var spendExceeded = &thread.LimitError{Code: thread.CodeSpendExceeded}

// amounts compares the exact nano amounts of an entry.
type amounts struct{ Max, Reserved, Actual, Own, Overrun int64 }

func nanoOf(e Entry) amounts {
	return amounts{e.MaxNano, e.ReservedNano, e.ActualNano, e.OwnNano, e.OverrunNano}
}

func (f fixture) want(t *testing.T, id string, want amounts, status string) {
	t.Helper()
	e, err := f.l.Get(f.ctx, id)
	require.NoError(t, err, "get %s", id)
	if diff := cmp.Diff(want, nanoOf(e)); diff != "" {
		t.Errorf("entry %s (-want +got):\n%s", id, diff)
	}
	require.Equal(t, status, e.Status, "entry %s status", id)
	require.Equal(t, int64(e.Remaining*Nano+0.5*sign(e.Remaining)), e.MaxNano-e.ReservedNano-e.ActualNano, "entry %s remaining %g inconsistent", id, e.Remaining)
}

func (f fixture) must(t *testing.T, err error) {
	t.Helper()
	require.NoError(t, err)
}

func sign(x float64) float64 {
	if x < 0 {
		return -1
	}
	return 1
}

func TestToNano(t *testing.T) {
	t.Parallel()
	tests := []struct {
		usd  float64
		want int64
		ok   bool
	}{
		{0, 0, true}, {1, 1e9, true}, {0.1, 100_000_000, true}, {0.0000000004, 0, true},
		{0.0000000006, 1, true}, {1e6, 1e15, true}, {1e6 + 1, 0, false}, {-0.01, 0, false},
	}
	for _, tt := range tests {
		got, err := ToNano(tt.usd)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ToNano(%g) = %d, %v; want %d ok=%v", tt.usd, got, err, tt.want, tt.ok)
		}
	}
}

func TestRegister(t *testing.T) {
	t.Parallel()
	f := setup(t)
	require.NoError(t, f.l.Register(f.ctx, "root", 1.5))
	require.NoError(t, f.l.Register(f.ctx, "root", 1.5), "idempotent register")
	err := f.l.Register(f.ctx, "root", 2)
	require.ErrorIs(t, err, ErrExists, "other max")
	f.want(t, "root", amounts{Max: 1.5e9}, StatusActive)
	_, err = f.l.Get(f.ctx, "nope")
	require.ErrorIs(t, err, ErrNotFound, "get missing")
	require.Error(t, f.l.Register(f.ctx, "bad", -1), "negative max accepted")
	// A child id cannot be registered as a root.
	_, err = f.l.Admit(f.ctx, "kid", []string{"root"}, 0.5, false)
	require.NoError(t, err)
	err = f.l.Register(f.ctx, "kid", 0.5)
	require.ErrorIs(t, err, ErrExists, "register a child")
}

// TestAdmittedChildrenShareTheBudget: children admitted with their
// parent's own limit share it; every charge is live at every level, and
// the one that does not fit is clamped at the level with the least room.
func TestAdmittedChildrenShareTheBudget(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "root", 1))
	for _, k := range []string{"a", "b", "c"} {
		a, err := f.l.Admit(f.ctx, k, []string{"root"}, 1, false)
		require.NoError(t, err, "admit %s", k)
		require.Equal(t, 1.0, a.Left, "admit %s: %+v", k, a)
		require.Equal(t, 1.0, a.Max, "admit %s: %+v", k, a)
		require.False(t, a.Guaranteed, "admit %s: %+v", k, a)
	}
	f.want(t, "root", amounts{Max: 1e9}, StatusActive)
	for i, k := range []string{"a", "b", "c"} {
		c, err := f.l.Charge(f.ctx, k, []string{"root"}, k+":1", 0.3)
		require.NoError(t, err, "charge %s", k)
		// The root has the least room from the second charge on (a tie
		// names the lowest level).
		want := 1 - 0.3*float64(i+1)
		require.LessOrEqual(t, math.Abs(c.Left-want), 1e-9, "charge %s: left %g by %s, want %g by root", k, c.Left, c.Limiter.ID, want)
		require.Equal(t, c.Limiter.ID == "root", i > 0, "charge %s: left %g by %s, want %g by root", k, c.Left, c.Limiter.ID, want)
	}
	f.want(t, "root", amounts{Max: 1e9, Actual: 0.9e9}, StatusActive)
	// The root has 0.1 left; a's own ceiling has 0.7: the root limits.
	c, err := f.l.Charge(f.ctx, "a", []string{"root"}, "a:2", 0.3)
	require.ErrorIs(t, err, spendExceeded, "overcharge")
	require.Contains(t, err.Error(), "ancestor root", "overcharge: %v, want spend_exceeded naming root", err)
	require.EqualValues(t, 0.4e9, c.OwnNano, "clamped charge: %+v", c)
	require.EqualValues(t, 0.2e9, c.OverrunNano, "clamped charge: %+v", c)
	require.Equal(t, 0.0, c.Left, "clamped charge: %+v", c)
	f.want(t, "root", amounts{Max: 1e9, Actual: 1e9}, StatusActive)
	f.want(t, "a", amounts{Max: 1e9, Actual: 0.4e9, Own: 0.4e9, Overrun: 0.2e9}, StatusActive)
	// Nothing is left: a new child is not admitted, and says why.
	_, err = f.l.Admit(f.ctx, "d", []string{"root"}, 1, false)
	require.ErrorIs(t, err, ErrInsufficientBudget, "admit with nothing left")
	require.ErrorIs(t, err, spendExceeded, "admit with nothing left")
	require.Contains(t, err.Error(), "root", "admit with nothing left: %v", err)
	_, err = f.l.Get(f.ctx, "d")
	require.ErrorIs(t, err, ErrNotFound, "refused child exists")
}

// TestAdmitBoundedByPath: a deeper child is admitted with the room of the
// tightest level above it, and its own smaller ceiling binds its charges.
func TestAdmitBoundedByPath(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "r", 1))
	_, err := f.l.Admit(f.ctx, "m", []string{"r"}, 0.5, false)
	f.must(t, err)
	a, err := f.l.Admit(f.ctx, "k", []string{"m", "r"}, 0.8, false)
	f.must(t, err)
	require.Equal(t, 0.8, a.Max, "admit under m: %+v, want max 0.8 left 0.5", a)
	require.Equal(t, 0.5, a.Left, "admit under m: %+v, want max 0.8 left 0.5", a)
	_, err = f.l.Charge(f.ctx, "k", []string{"m", "r"}, "k:1", 0.6)
	require.ErrorIs(t, err, spendExceeded, "charge past m's ceiling")
	require.Contains(t, err.Error(), "ancestor m", "charge past m's ceiling: %v", err)
	f.want(t, "m", amounts{Max: 0.5e9, Actual: 0.5e9}, StatusActive)
	f.want(t, "r", amounts{Max: 1e9, Actual: 0.5e9}, StatusActive)
	// The root still has room for others; m's subtree has none.
	_, err = f.l.Charge(f.ctx, "r", nil, "r:1", 0.2)
	f.must(t, err)
	_, err = f.l.Charge(f.ctx, "m", []string{"r"}, "m:1", 0.01)
	require.ErrorIs(t, err, spendExceeded, "charge of a spent entry")
	require.Contains(t, err.Error(), "its own budget", "charge of a spent entry: %v", err)
	// Admission under a released parent is refused.
	f.must(t, f.l.Release(f.ctx, "m", []string{"r"}, "completed"))
	_, err = f.l.Admit(f.ctx, "k2", []string{"m", "r"}, 0.1, false)
	require.ErrorIs(t, err, ErrReleased, "admit under released parent")
}

// TestReserveGuarantees: a guaranteed child's amount is set aside up
// front in the levels above it, its spend moves from reserved to actual
// above it, and its release gives the rest back.
func TestReserveGuarantees(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "root", 1))
	_, err := f.l.Admit(f.ctx, "p", []string{"root"}, 1, false)
	f.must(t, err)
	f.must(t, f.l.Reserve(f.ctx, "g", []string{"p", "root"}, 0.6))
	f.must(t, f.l.Reserve(f.ctx, "g", []string{"p", "root"}, 0.6)) // idempotent
	// Set aside in p and (p being admitted) in the root too.
	f.want(t, "p", amounts{Max: 1e9, Reserved: 0.6e9}, StatusActive)
	f.want(t, "root", amounts{Max: 1e9, Reserved: 0.6e9}, StatusActive)
	f.want(t, "g", amounts{Max: 0.6e9}, StatusActive)
	err = f.l.Reserve(f.ctx, "g2", []string{"p", "root"}, 0.5)
	require.ErrorIs(t, err, ErrInsufficientBudget, "over-reserve")
	require.ErrorIs(t, err, spendExceeded, "over-reserve")
	// An admitted sibling gets what is not set aside.
	_, err = f.l.Admit(f.ctx, "s", []string{"p", "root"}, 1, false)
	f.must(t, err)
	_, err = f.l.Charge(f.ctx, "s", []string{"p", "root"}, "s:1", 0.5)
	require.ErrorIs(t, err, spendExceeded, "sibling spending the guarantee")
	f.want(t, "s", amounts{Max: 1e9, Actual: 0.4e9, Own: 0.4e9, Overrun: 0.1e9}, StatusActive)
	// The guarantee holds: g spends its whole amount.
	c, err := f.l.Charge(f.ctx, "g", []string{"p", "root"}, "g:1", 0.6)
	f.must(t, err)
	require.Equal(t, 0.0, c.Left, "guaranteed charge: %+v", c)
	require.Equal(t, "g", c.Limiter.ID, "guaranteed charge: %+v", c)
	f.want(t, "p", amounts{Max: 1e9, Actual: 1e9}, StatusActive)
	f.want(t, "root", amounts{Max: 1e9, Actual: 1e9}, StatusActive)

	// A guaranteed grandchild of a guaranteed child: set aside in g only
	// (g's own reservation covers the levels above it).
	f.must(t, f.l.Register(f.ctx, "r2", 1))
	f.must(t, f.l.Reserve(f.ctx, "g2", []string{"r2"}, 0.5))
	f.must(t, f.l.Reserve(f.ctx, "gg", []string{"g2", "r2"}, 0.2))
	f.want(t, "g2", amounts{Max: 0.5e9, Reserved: 0.2e9}, StatusActive)
	f.want(t, "r2", amounts{Max: 1e9, Reserved: 0.5e9}, StatusActive)
	_, err = f.l.Charge(f.ctx, "gg", []string{"g2", "r2"}, "gg:1", 0.05)
	f.must(t, err)
	f.want(t, "g2", amounts{Max: 0.5e9, Reserved: 0.15e9, Actual: 0.05e9}, StatusActive)
	f.want(t, "r2", amounts{Max: 1e9, Reserved: 0.45e9, Actual: 0.05e9}, StatusActive)
	// g2 ends: it gives back what it neither spent nor set aside for gg.
	f.must(t, f.l.Release(f.ctx, "g2", []string{"r2"}, "completed"))
	f.want(t, "r2", amounts{Max: 1e9, Reserved: 0.15e9, Actual: 0.05e9}, StatusActive)
	// gg outlives it and still spends its guarantee.
	_, err = f.l.Charge(f.ctx, "gg", []string{"g2", "r2"}, "gg:2", 0.15)
	f.must(t, err)
	f.want(t, "r2", amounts{Max: 1e9, Reserved: 0, Actual: 0.2e9}, StatusActive)
	f.must(t, f.l.Release(f.ctx, "gg", []string{"g2", "r2"}, "completed"))
	f.want(t, "g2", amounts{Max: 0.5e9, Actual: 0.2e9}, "completed")
	f.want(t, "r2", amounts{Max: 1e9, Actual: 0.2e9}, StatusActive)
}

func TestCharge(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "root", 1))
	f.must(t, f.l.Reserve(f.ctx, "a", []string{"root"}, 0.5))
	path := []string{"root"}
	c, err := f.l.Charge(f.ctx, "a", path, "a:1", 0.2)
	require.NoError(t, err, "charge: %+v", c)
	require.EqualValues(t, 0.2e9, c.OwnNano, "charge: %+v %v", c, err)
	// The retry of the same key is applied once.
	_, err = f.l.Charge(f.ctx, "a", path, "a:1", 0.2)
	require.NoError(t, err)
	f.want(t, "a", amounts{Max: 0.5e9, Actual: 0.2e9, Own: 0.2e9}, StatusActive)
	f.want(t, "root", amounts{Max: 1e9, Reserved: 0.3e9, Actual: 0.2e9}, StatusActive)
	// A charge that does not fit is clamped; the rest is overrun.
	c, err = f.l.Charge(f.ctx, "a", path, "a:2", 0.45)
	require.ErrorIs(t, err, spendExceeded, "overcharge")
	require.Equal(t, 0.15, c.Overrun, "overcharge entry %+v", c)
	require.Equal(t, 0.5, c.Actual, "overcharge entry %+v", c)
	// Its retry reports the same outcome and changes nothing.
	_, err = f.l.Charge(f.ctx, "a", path, "a:2", 0.45)
	require.ErrorIs(t, err, spendExceeded, "retried overcharge")
	f.want(t, "a", amounts{Max: 0.5e9, Actual: 0.5e9, Own: 0.5e9, Overrun: 0.15e9}, StatusActive)
	f.want(t, "root", amounts{Max: 1e9, Actual: 0.5e9}, StatusActive)

	_, err = f.l.Charge(f.ctx, "nope", nil, "k", 1)
	require.ErrorIs(t, err, ErrNotFound, "charge missing")
	_, err = f.l.Charge(f.ctx, "a", path, "", 1)
	require.Error(t, err, "empty key accepted")
	// Paths that are not the entry's are refused before anything changes.
	for _, bad := range [][]string{nil, {"a"}, {"root", "x"}, {"x"}} {
		_, err := f.l.Charge(f.ctx, "a", bad, "a:9", 0.01)
		require.Error(t, err, "path %q accepted", bad)
	}
	if _, err := f.l.Charge(f.ctx, "a", []string{"zz"}, "a:9", 0.01); !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrPath) {
		t.Fatalf("unknown ancestor: %v", err)
	}
	f.must(t, f.l.Release(f.ctx, "a", path, "completed"))
	_, err = f.l.Charge(f.ctx, "a", path, "a:3", 0.01)
	require.ErrorIs(t, err, ErrReleased, "charge released")
	// A retried key is still answered after release.
	_, err = f.l.Charge(f.ctx, "a", path, "a:1", 0.2)
	require.NoError(t, err, "retry after release")
	f.want(t, "root", amounts{Max: 1e9, Actual: 0.5e9}, StatusActive)
}

func TestReportActual(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "root", 1))
	_, err := f.l.Charge(f.ctx, "root", nil, "t1", 0.1)
	require.NoError(t, err)
	_, err = f.l.ReportActual(f.ctx, "root", nil, 0.3)
	require.NoError(t, err)
	if _, err := f.l.ReportActual(f.ctx, "root", nil, 0.3); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := f.l.ReportActual(f.ctx, "root", nil, 0.2); err != nil { // lower: ignored
		t.Fatal(err)
	}
	f.want(t, "root", amounts{Max: 1e9, Actual: 0.3e9, Own: 0.3e9}, StatusActive)
	_, err = f.l.ReportActual(f.ctx, "root", nil, 1.2)
	require.ErrorIs(t, err, spendExceeded, "report over")
	if _, err := f.l.ReportActual(f.ctx, "root", nil, 1.2); err != nil { // already recorded
		t.Fatalf("repeated report over: %v", err)
	}
	f.want(t, "root", amounts{Max: 1e9, Actual: 1e9, Own: 1e9, Overrun: 0.2e9}, StatusActive)
}

// TestReopen: a resume reopens its chain's released entry with what the
// chain has left, and is refused when nothing is left.
func TestReopen(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "r", 5))
	_, err := f.l.Charge(f.ctx, "r", nil, "r:1", 1.5)
	f.must(t, err)
	f.must(t, f.l.Release(f.ctx, "r", nil, "completed"))
	_, err = f.l.Admit(f.ctx, "r", nil, 1, false)
	require.ErrorIs(t, err, ErrReleased, "admit a released entry without reopen")
	a, err := f.l.Admit(f.ctx, "r", nil, 1, true)
	f.must(t, err)
	require.Equal(t, 3.5, a.Left, "reopen: %+v, want left 3.5 of 5", a)
	require.Equal(t, 5.0, a.Max, "reopen: %+v, want left 3.5 of 5", a)
	require.Equal(t, StatusActive, a.Status, "reopen: %+v, want left 3.5 of 5", a)
	_, err = f.l.Charge(f.ctx, "r", nil, "r2:1", 4)
	require.ErrorIs(t, err, spendExceeded, "a resume spending past the first limit")
	f.must(t, f.l.Release(f.ctx, "r", nil, "completed"))
	_, err = f.l.Admit(f.ctx, "r", nil, 1, true)
	require.ErrorIs(t, err, ErrInsufficientBudget, "reopen with nothing left")
	f.want(t, "r", amounts{Max: 5e9, Actual: 5e9, Own: 5e9, Overrun: 0.5e9}, "completed")

	// A guaranteed entry reopens as an admitted one.
	f.must(t, f.l.Register(f.ctx, "q", 1))
	f.must(t, f.l.Reserve(f.ctx, "qa", []string{"q"}, 0.4))
	_, err = f.l.Charge(f.ctx, "qa", []string{"q"}, "qa:1", 0.1)
	f.must(t, err)
	f.must(t, f.l.Release(f.ctx, "qa", []string{"q"}, "completed"))
	f.want(t, "q", amounts{Max: 1e9, Actual: 0.1e9}, StatusActive)
	a, err = f.l.Admit(f.ctx, "qa", []string{"q"}, 0, true)
	f.must(t, err)
	require.False(t, a.Guaranteed, "reopened guaranteed entry: %+v", a)
	require.Equal(t, 0.3, a.Left, "reopened guaranteed entry: %+v", a)
	f.want(t, "q", amounts{Max: 1e9, Actual: 0.1e9}, StatusActive)
}

func TestRelease(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "r", 1))
	f.must(t, f.l.Reserve(f.ctx, "a", []string{"r"}, 0.5))
	require.Error(t, f.l.Release(f.ctx, "a", []string{"r"}, "active"), "status active accepted")
	require.Error(t, f.l.Release(f.ctx, "a", []string{"x"}, "completed"), "wrong path accepted")
	f.want(t, "r", amounts{Max: 1e9, Reserved: 0.5e9}, StatusActive)
	f.must(t, f.l.Release(f.ctx, "a", []string{"r"}, "completed"))
	f.must(t, f.l.Release(f.ctx, "a", []string{"r"}, "error")) // idempotent, status kept
	f.want(t, "a", amounts{Max: 0.5e9}, "completed")
	f.want(t, "r", amounts{Max: 1e9}, StatusActive)
	err := f.l.Release(f.ctx, "zz", nil, "completed")
	require.ErrorIs(t, err, ErrNotFound, "release missing")
}

// TestRoom reads what a subtree may still spend, and who limits it.
func TestRoom(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "r", 1))
	_, err := f.l.Admit(f.ctx, "a", []string{"r"}, 0.7, false)
	f.must(t, err)
	_, err = f.l.Charge(f.ctx, "r", nil, "r:1", 0.5)
	f.must(t, err)
	room, err := f.l.Room(f.ctx, "a", []string{"r"})
	f.must(t, err)
	require.Equal(t, 0.5, room.Left, "room: %+v", room)
	require.Equal(t, "r", room.Limiter.ID, "room: %+v", room)
	require.Equal(t, StatusActive, room.Status, "room: %+v", room)
	_, err = f.l.Room(f.ctx, "zz", nil)
	require.ErrorIs(t, err, ErrNotFound, "room of a missing entry")
}

// TestLuaAgreesWithModel runs sequences on Redis and on the Go model and
// requires the same outcome class for every op and the same entries, before
// and after everything is released: six random sequences and every input of
// FuzzLedgerSequence's checked-in corpus.
func TestLuaAgreesWithModel(t *testing.T) {
	t.Parallel()
	inputs := map[string][]byte{}
	for seed := range uint64(6) {
		rng := rand.New(rand.NewPCG(seed, 99))
		data := make([]byte, 1+4*150)
		for i := range data {
			data[i] = byte(rng.IntN(256))
		}
		inputs[fmt.Sprint("random-", seed)] = data
	}
	corpus, err := filepath.Glob(filepath.Join("testdata", "fuzz", "FuzzLedgerSequence", "*"))
	require.NoError(t, err, "no FuzzLedgerSequence corpus")
	require.NotEmpty(t, corpus, "no FuzzLedgerSequence corpus: %v", err)
	for _, p := range corpus {
		inputs["corpus-"+filepath.Base(p)] = readCorpusBytes(t, p)
	}
	for name, data := range inputs {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			luaAgrees(t, f.ctx, f.l, data)
		})
	}
}

// FuzzLuaAgreesWithModel fuzzes the Lua scripts themselves against the Go
// model, on real Redis (each input in a namespace of its own, deleted
// afterwards):
//
//	go test -run '^$' -fuzz FuzzLuaAgreesWithModel -fuzztime 60s ./ledger
func FuzzLuaAgreesWithModel(f *testing.F) {
	f.Add([]byte{20, 0, 1, 50, 0, 1, 1, 10, 1, 3, 1, 0, 0})
	f.Add([]byte{1, 0, 2, 255, 7, 1, 2, 9, 9, 3, 2, 0, 0, 1, 2, 200, 3})
	r := testenv.NewRedis(f)
	var n atomic.Int64
	f.Fuzz(func(t *testing.T, data []byte) {
		ks := keyspace.New(fmt.Sprintf("%s-%d", r.Namespace, n.Add(1)))
		ctx := context.Background()
		defer func() { // every key a sequence can touch: 16 threads' entries
			var keys []string
			for i := range 16 {
				keys = append(keys, ks.Ledger(nodeID(i)))
			}
			r.Client.Del(ctx, keys...)
		}()
		luaAgrees(t, ctx, New(r.Client, ks), data)
	})
}

// readCorpusBytes reads a `go test fuzz v1` file holding one []byte.
func readCorpusBytes(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	require.Len(t, lines, 2, "%s: not a go fuzz corpus file with one []byte", path)
	require.Equal(t, "go test fuzz v1", lines[0], "%s: not a go fuzz corpus file with one []byte", path)
	require.True(t, strings.HasPrefix(lines[1], "[]byte("), "%s: not a go fuzz corpus file with one []byte", path)
	require.True(t, strings.HasSuffix(lines[1], ")"), "%s: not a go fuzz corpus file with one []byte", path)
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	require.NoError(t, err, "%s", path)
	return []byte(s)
}

// luaAgrees replays decoded ops on l (the Lua scripts) and on the model:
// every op must end in the same outcome class, and afterwards, and again
// once everything is released, every entry must match.
func luaAgrees(t testing.TB, ctx context.Context, l *Ledger, data []byte) {
	t.Helper()
	rootMax, ops := decodeOps(data)
	m := newModel()
	require.NoError(t, m.register(nodeID(0), rootMax))
	require.NoError(t, l.Register(ctx, nodeID(0), FromNano(rootMax)))
	for i, o := range ops {
		id := nodeID(o.node)
		var merr, lerr error
		switch o.kind {
		case opAdmit:
			if o.node == 0 || m.e[nodeID(o.parent)] == nil || slices.Contains(m.ancestorsOf(nodeID(o.parent)), id) || o.node == o.parent {
				continue // a caller never passes a path through the entry itself
			}
			p := nodeID(o.parent)
			var mleft int64
			var a Admission
			mleft, merr = m.admit(id, p, o.amt, false)
			a, lerr = l.Admit(ctx, id, append([]string{p}, m.ancestorsOf(p)...), FromNano(o.amt), false)
			if merr == nil && lerr == nil && FromNano(mleft) != a.Left {
				t.Fatalf("op %d %+v: left model %d, lua %g", i, o, mleft, a.Left)
			}
		case opReserve:
			if o.node == 0 || m.e[nodeID(o.parent)] == nil || slices.Contains(m.ancestorsOf(nodeID(o.parent)), id) || o.node == o.parent {
				continue
			}
			p := nodeID(o.parent)
			merr = m.reserve(id, p, o.amt)
			lerr = l.Reserve(ctx, id, append([]string{p}, m.ancestorsOf(p)...), FromNano(o.amt))
		case opCharge, opRetry:
			if m.e[id] == nil {
				continue
			}
			merr = m.charge(id, o.key, o.amt, false)
			_, lerr = l.Charge(ctx, id, m.ancestorsOf(id), o.key, FromNano(o.amt))
		case opReport:
			e := m.e[id]
			if e == nil {
				continue
			}
			abs := e.own + e.overrun + o.amt/2
			merr = m.charge(id, "", abs, true)
			_, lerr = l.ReportActual(ctx, id, m.ancestorsOf(id), FromNano(abs))
		case opRelease:
			if m.e[id] == nil {
				continue
			}
			merr = m.release(id, "completed")
			lerr = l.Release(ctx, id, m.ancestorsOf(id), "completed")
		case opReopen:
			e := m.e[id]
			if e == nil {
				continue
			}
			_, merr = m.admit(id, e.parent, 0, true)
			_, lerr = l.Admit(ctx, id, m.ancestorsOf(id), 0, true)
		}
		require.Equal(t, classify(lerr), classify(merr), "op %d %+v: model %v, lua %v", i, o, merr, lerr)
	}
	sameEntries(t, ctx, l, m, "after the ops")
	for i := 15; i >= 0; i-- {
		id := nodeID(i)
		if e := m.e[id]; e != nil && e.status == StatusActive {
			merr, lerr := m.release(id, "completed"), l.Release(ctx, id, m.ancestorsOf(id), "completed")
			require.Equal(t, classify(lerr), classify(merr), "final release %s: model %v, lua %v", id, merr, lerr)
		}
	}
	sameEntries(t, ctx, l, m, "after releasing everything")
}

// sameEntries requires every model entry to equal the ledger's.
func sameEntries(t testing.TB, ctx context.Context, l *Ledger, m *model, when string) {
	t.Helper()
	for id, me := range m.e {
		e, err := l.Get(ctx, id)
		require.NoError(t, err)
		want := amounts{me.max, me.reserved, me.actual, me.own, me.overrun}
		if diff := cmp.Diff(want, nanoOf(e)); diff != "" || e.Status != me.status || e.ParentID != me.parent || e.Guaranteed != me.g {
			t.Errorf("%s: entry %s (-model +lua):\n%s status %s/%s", when, id, diff, me.status, e.Status)
		}
	}
}

func classify(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrInsufficientBudget):
		return "insufficient"
	case errors.Is(err, ErrNotFound):
		return "notfound"
	case errors.Is(err, ErrExists):
		return "exists"
	case errors.Is(err, ErrReleased):
		return "released"
	case errors.Is(err, ErrPath):
		return "path"
	case errors.Is(err, errModelOver), errors.Is(err, spendExceeded):
		return "over"
	}
	return "other: " + err.Error()
}

// TestLargeAmounts checks exact integer arithmetic up to MaxAmount.
func TestLargeAmounts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.must(t, f.l.Register(f.ctx, "big", MaxAmount))
	f.must(t, f.l.Reserve(f.ctx, "k", []string{"big"}, 999_999.999999999))
	if _, err := f.l.Charge(f.ctx, "big", nil, "x", 0.000000001); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Charge(f.ctx, "k", []string{"big"}, "y", 999_999.999999998); err != nil {
		t.Fatal(err)
	}
	f.want(t, "big", amounts{Max: 1e15, Reserved: 1, Actual: 999_999_999_999_999, Own: 1}, StatusActive)
	f.must(t, f.l.Release(f.ctx, "k", []string{"big"}, "completed"))
	f.want(t, "big", amounts{Max: 1e15, Actual: 999_999_999_999_999, Own: 1}, StatusActive)
	e, err := f.l.Get(f.ctx, "big")
	require.NoError(t, err, "remaining %v", e.Remaining)
	require.Equal(t, 1e-9, e.Remaining, "remaining %v %v", e.Remaining, err)
}
