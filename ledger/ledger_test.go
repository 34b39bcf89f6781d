package ledger

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/spool-run/spool/internal/testenv"
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
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	if diff := cmp.Diff(want, nanoOf(e)); diff != "" {
		t.Errorf("entry %s (-want +got):\n%s", id, diff)
	}
	if e.Status != status {
		t.Errorf("entry %s status %q, want %q", id, e.Status, status)
	}
	if e.MaxNano-e.ReservedNano-e.ActualNano != int64(e.Remaining*Nano+0.5*sign(e.Remaining)) {
		t.Errorf("entry %s remaining %g inconsistent", id, e.Remaining)
	}
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
	if err := f.l.Register(f.ctx, "root", 1.5); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Register(f.ctx, "root", 1.5); err != nil {
		t.Fatalf("idempotent register: %v", err)
	}
	if err := f.l.Register(f.ctx, "root", 2); !errors.Is(err, ErrExists) {
		t.Fatalf("other max: %v, want ErrExists", err)
	}
	f.want(t, "root", amounts{Max: 1.5e9}, StatusActive)
	if _, err := f.l.Get(f.ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get missing: %v", err)
	}
	if err := f.l.Register(f.ctx, "bad", -1); err == nil {
		t.Fatal("negative max accepted")
	}
	// A child id cannot be registered as a root.
	if err := f.l.Reserve(f.ctx, "kid", "root", 0.5); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Register(f.ctx, "kid", 0.5); !errors.Is(err, ErrExists) {
		t.Fatalf("register a child: %v, want ErrExists", err)
	}
}

func TestReserve(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.l.Register(f.ctx, "root", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Reserve(f.ctx, "a", "root", 0.6); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Reserve(f.ctx, "a", "root", 0.6); err != nil {
		t.Fatalf("idempotent reserve: %v", err)
	}
	f.want(t, "root", amounts{Max: 1e9, Reserved: 0.6e9}, StatusActive)
	f.want(t, "a", amounts{Max: 0.6e9}, StatusActive)

	err := f.l.Reserve(f.ctx, "b", "root", 0.5)
	if !errors.Is(err, ErrInsufficientBudget) || !errors.Is(err, spendExceeded) {
		t.Fatalf("over-reserve: %v, want ErrInsufficientBudget + spend_exceeded", err)
	}
	f.want(t, "root", amounts{Max: 1e9, Reserved: 0.6e9}, StatusActive) // nothing changed
	if _, err := f.l.Get(f.ctx, "b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused child exists: %v", err)
	}
	// Exactly the remainder fits.
	if err := f.l.Reserve(f.ctx, "b", "root", 0.4); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Reserve(f.ctx, "c", "nope", 0.1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing parent: %v", err)
	}
	if err := f.l.Reserve(f.ctx, "a", "b", 0); !errors.Is(err, ErrExists) {
		t.Fatalf("child of another parent: %v", err)
	}
	if err := f.l.Release(f.ctx, "b", []string{"root"}, "completed"); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Reserve(f.ctx, "c", "b", 0); !errors.Is(err, ErrReleased) {
		t.Fatalf("reserve from released parent: %v", err)
	}
}

func TestCharge(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.l.Register(f.ctx, "root", 1); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Reserve(f.ctx, "a", "root", 0.5); err != nil {
		t.Fatal(err)
	}
	e, err := f.l.Charge(f.ctx, "a", "a:1", 0.2)
	if err != nil || e.OwnNano != 0.2e9 {
		t.Fatalf("charge: %+v %v", e, err)
	}
	// The retry of the same key is applied once.
	if _, err := f.l.Charge(f.ctx, "a", "a:1", 0.2); err != nil {
		t.Fatal(err)
	}
	f.want(t, "a", amounts{Max: 0.5e9, Actual: 0.2e9, Own: 0.2e9}, StatusActive)
	// A charge that does not fit is clamped; the rest is overrun.
	e, err = f.l.Charge(f.ctx, "a", "a:2", 0.45)
	if !errors.Is(err, spendExceeded) {
		t.Fatalf("overcharge: %v, want spend_exceeded", err)
	}
	if e.Overrun != 0.15 || e.Actual != 0.5 {
		t.Fatalf("overcharge entry %+v", e)
	}
	// Its retry reports the same outcome and changes nothing.
	if _, err := f.l.Charge(f.ctx, "a", "a:2", 0.45); !errors.Is(err, spendExceeded) {
		t.Fatalf("retried overcharge: %v", err)
	}
	f.want(t, "a", amounts{Max: 0.5e9, Actual: 0.5e9, Own: 0.5e9, Overrun: 0.15e9}, StatusActive)
	f.want(t, "root", amounts{Max: 1e9, Reserved: 0.5e9}, StatusActive)

	if _, err := f.l.Charge(f.ctx, "nope", "k", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("charge missing: %v", err)
	}
	if _, err := f.l.Charge(f.ctx, "a", "", 1); err == nil {
		t.Fatal("empty key accepted")
	}
	if err := f.l.Release(f.ctx, "a", []string{"root"}, "completed"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Charge(f.ctx, "a", "a:3", 0.01); !errors.Is(err, ErrReleased) {
		t.Fatalf("charge released: %v", err)
	}
	// A retried key is still answered after release.
	if _, err := f.l.Charge(f.ctx, "a", "a:1", 0.2); err != nil {
		t.Fatalf("retry after release: %v", err)
	}
}

func TestReportActual(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.l.Register(f.ctx, "root", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Charge(f.ctx, "root", "t1", 0.1); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.ReportActual(f.ctx, "root", 0.3); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.ReportActual(f.ctx, "root", 0.3); err != nil { // idempotent
		t.Fatal(err)
	}
	if _, err := f.l.ReportActual(f.ctx, "root", 0.2); err != nil { // lower: ignored
		t.Fatal(err)
	}
	f.want(t, "root", amounts{Max: 1e9, Actual: 0.3e9, Own: 0.3e9}, StatusActive)
	if _, err := f.l.ReportActual(f.ctx, "root", 1.2); !errors.Is(err, spendExceeded) {
		t.Fatalf("report over: %v", err)
	}
	if _, err := f.l.ReportActual(f.ctx, "root", 1.2); err != nil { // already recorded
		t.Fatalf("repeated report over: %v", err)
	}
	f.want(t, "root", amounts{Max: 1e9, Actual: 1e9, Own: 1e9, Overrun: 0.2e9}, StatusActive)
}

// TestReleaseCascade walks the package doc's rule through a three-level
// tree, releasing a parent before its child.
func TestReleaseCascade(t *testing.T) {
	t.Parallel()
	f := setup(t)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(f.l.Register(f.ctx, "r", 1))
	must(f.l.Reserve(f.ctx, "a", "r", 0.5))
	must(f.l.Reserve(f.ctx, "b", "a", 0.2))
	_, err := f.l.Charge(f.ctx, "a", "a:1", 0.1)
	must(err)
	_, err = f.l.Charge(f.ctx, "b", "b:1", 0.05)
	must(err)

	// Wrong ancestor lists are refused before anything changes.
	if err := f.l.Release(f.ctx, "b", []string{"r"}, "completed"); err == nil {
		t.Fatal("wrong ancestors accepted")
	}
	if err := f.l.Release(f.ctx, "b", nil, "completed"); err == nil {
		t.Fatal("missing ancestors accepted")
	}
	if err := f.l.Release(f.ctx, "b", []string{"a"}, "active"); err == nil {
		t.Fatal("status active accepted")
	}
	f.want(t, "b", amounts{Max: 0.2e9, Actual: 0.05e9, Own: 0.05e9}, StatusActive)

	// a releases first: r gets a's spend, and keeps holding b's 0.2.
	must(f.l.Release(f.ctx, "a", []string{"r"}, "completed"))
	f.want(t, "r", amounts{Max: 1e9, Reserved: 0.2e9, Actual: 0.1e9}, StatusActive)
	f.want(t, "a", amounts{Max: 0.5e9, Reserved: 0.2e9, Actual: 0.1e9, Own: 0.1e9}, "completed")
	must(f.l.Release(f.ctx, "a", []string{"r"}, "error")) // idempotent, status kept
	f.want(t, "a", amounts{Max: 0.5e9, Reserved: 0.2e9, Actual: 0.1e9, Own: 0.1e9}, "completed")

	// b still charges within its own reservation.
	_, err = f.l.Charge(f.ctx, "b", "b:2", 0.05)
	must(err)
	// b's release needs the list up to the first active ancestor (r).
	if err := f.l.Release(f.ctx, "b", []string{"a"}, "completed"); err == nil {
		t.Fatal("ancestor list stopping at a released ancestor accepted")
	}
	must(f.l.Release(f.ctx, "b", []string{"a", "r"}, "completed"))
	f.want(t, "a", amounts{Max: 0.5e9, Reserved: 0, Actual: 0.2e9, Own: 0.1e9}, "completed")
	f.want(t, "r", amounts{Max: 1e9, Reserved: 0, Actual: 0.2e9}, StatusActive)
	must(f.l.Release(f.ctx, "r", nil, "completed"))
	f.want(t, "r", amounts{Max: 1e9, Reserved: 0, Actual: 0.2e9}, "completed")
	if err := f.l.Release(f.ctx, "zz", nil, "completed"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("release missing: %v", err)
	}
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
	if err != nil || len(corpus) == 0 {
		t.Fatalf("no FuzzLedgerSequence corpus: %v", err)
	}
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
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 2 || lines[0] != "go test fuzz v1" || !strings.HasPrefix(lines[1], "[]byte(") || !strings.HasSuffix(lines[1], ")") {
		t.Fatalf("%s: not a go fuzz corpus file with one []byte", path)
	}
	s, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lines[1], "[]byte("), ")"))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}

// luaAgrees replays decoded ops on l (the Lua scripts) and on the model:
// every op must end in the same outcome class, and afterwards, and again
// once everything is released (children first), every entry must match.
func luaAgrees(t testing.TB, ctx context.Context, l *Ledger, data []byte) {
	t.Helper()
	rootMax, ops := decodeOps(data)
	m := newModel()
	if err := m.register(nodeID(0), rootMax); err != nil {
		t.Fatal(err)
	}
	if err := l.Register(ctx, nodeID(0), FromNano(rootMax)); err != nil {
		t.Fatal(err)
	}
	for i, o := range ops {
		id := nodeID(o.node)
		var merr, lerr error
		switch o.kind {
		case 0:
			if o.node == 0 || o.node == o.parent {
				continue
			}
			merr = m.reserve(id, nodeID(o.parent), o.amt)
			lerr = l.Reserve(ctx, id, nodeID(o.parent), FromNano(o.amt))
		case 1, 4:
			merr = m.charge(id, o.key, o.amt, false)
			_, lerr = l.Charge(ctx, id, o.key, FromNano(o.amt))
		case 2:
			e := m.e[id]
			if e == nil {
				continue
			}
			abs := e.own + e.overrun + o.amt/2
			merr = m.charge(id, "", abs, true)
			_, lerr = l.ReportActual(ctx, id, FromNano(abs))
		case 3:
			if m.e[id] == nil {
				continue
			}
			anc := m.ancestorsOf(id)
			merr = m.release(id, anc, "completed")
			lerr = l.Release(ctx, id, anc, "completed")
		}
		if classify(merr) != classify(lerr) {
			t.Fatalf("op %d %+v: model %v, lua %v", i, o, merr, lerr)
		}
	}
	sameEntries(t, ctx, l, m, "after the ops")
	for i := 15; i >= 0; i-- {
		id := nodeID(i)
		if e := m.e[id]; e != nil && e.status == StatusActive {
			anc := m.ancestorsOf(id)
			merr, lerr := m.release(id, anc, "completed"), l.Release(ctx, id, anc, "completed")
			if classify(merr) != classify(lerr) {
				t.Fatalf("final release %s: model %v, lua %v", id, merr, lerr)
			}
		}
	}
	sameEntries(t, ctx, l, m, "after releasing everything")
}

// sameEntries requires every model entry to equal the ledger's.
func sameEntries(t testing.TB, ctx context.Context, l *Ledger, m *model, when string) {
	t.Helper()
	for id, me := range m.e {
		e, err := l.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		want := amounts{me.max, me.reserved, me.actual, me.own, me.overrun}
		if diff := cmp.Diff(want, nanoOf(e)); diff != "" || e.Status != me.status || e.ParentID != me.parent {
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
	case errors.Is(err, errModelOver), errors.Is(err, spendExceeded):
		return "over"
	}
	return "other: " + err.Error()
}

// TestLargeAmounts checks exact integer arithmetic up to MaxAmount.
func TestLargeAmounts(t *testing.T) {
	t.Parallel()
	f := setup(t)
	if err := f.l.Register(f.ctx, "big", MaxAmount); err != nil {
		t.Fatal(err)
	}
	if err := f.l.Reserve(f.ctx, "k", "big", 999_999.999999999); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Charge(f.ctx, "big", "x", 0.000000001); err != nil {
		t.Fatal(err)
	}
	if _, err := f.l.Charge(f.ctx, "k", "y", 999_999.999999998); err != nil {
		t.Fatal(err)
	}
	f.want(t, "big", amounts{Max: 1e15, Reserved: 999_999_999_999_999, Actual: 1, Own: 1}, StatusActive)
	if err := f.l.Release(f.ctx, "k", []string{"big"}, "completed"); err != nil {
		t.Fatal(err)
	}
	f.want(t, "big", amounts{Max: 1e15, Actual: 999_999_999_999_999, Own: 1}, StatusActive)
	e, err := f.l.Get(f.ctx, "big")
	if err != nil || e.Remaining != 1e-9 {
		t.Fatalf("remaining %v %v", e.Remaining, err)
	}
}
