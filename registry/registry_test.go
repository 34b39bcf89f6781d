package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
)

type regFixture struct {
	ctx   context.Context
	reg   *Registry
	acts  *Activations
	r     *testenv.Redis
	ks    keyspace.Space
	clock *testenv.Clock
}

func setupRegistry(t testing.TB) regFixture {
	t.Helper()
	r := testenv.NewRedis(t)
	ks := keyspace.New(r.Namespace)
	clock := testenv.NewTickingClock(time.Date(2026, 2, 17, 10, 0, 56, 0, time.UTC), time.Millisecond)
	reg, err := New(Config{Client: r.Client, Keys: ks, Now: clock.Now, SafetyPoll: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return regFixture{ctx: context.Background(), reg: reg, acts: NewActivations(r.Client, ks, clock.Now), r: r, ks: ks, clock: clock}
}

// claim claims created thread id the way a worker does (Activations.Claim
// of its start task) and returns the record as claimed: its Version is
// the claimer's lease.
func (f regFixture) claim(t testing.TB, id string) *Record {
	t.Helper()
	c, err := f.acts.Claim(f.ctx, id, "start", 0, "tok-"+id, id, time.Minute)
	if err != nil {
		t.Fatalf("claim %s: %v", id, err)
	}
	return c.Record
}

func (f regFixture) register(t testing.TB, id, parent string) *Record {
	t.Helper()
	rec, err := f.reg.Register(f.ctx, NewThread{ThreadID: id, Directive: "test/d", ParentID: parent, Limits: thread.DefaultLimits()})
	if err != nil {
		t.Fatalf("register %s: %v", id, err)
	}
	return rec
}

func (f regFixture) get(t testing.TB, id string) *Record {
	t.Helper()
	rec, err := f.reg.Get(f.ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return rec
}

// together runs f(0) … f(n-1), each in its own goroutine, released at
// the same moment, and returns when all have returned.
func together(n int, f func(g int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for g := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			f(g)
		}()
	}
	close(start)
	wg.Wait()
}

func TestNewRegistryConfig(t *testing.T) {
	t.Parallel()
	if _, err := New(Config{}); err == nil {
		t.Fatal("nil client accepted")
	}
	c := Config{}.WithDefaults()
	if c.Keys.Prefix() != "spool:{spool}:" || c.SafetyPoll != 2*time.Second || c.Now == nil {
		t.Fatalf("defaults %+v", c)
	}
}

func TestRegisterAndGet(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	rec, err := f.reg.Register(f.ctx, NewThread{
		ThreadID: "root-1", Directive: "test/root", Model: "m1", Capabilities: []string{"rye.execute.tool.*"},
		Bundle: "sha256:ab", Inputs: map[string]any{"level": "1"}, Queue: "q", Limits: thread.DefaultLimits(),
	})
	if err != nil {
		t.Fatal(err)
	}
	want := &Record{
		ThreadID: "root-1", Directive: "test/root", Status: thread.StatusCreated, ChainRootID: "root-1",
		Outputs: map[string]any{}, Limits: thread.DefaultLimits(), Model: "m1", Capabilities: []string{"rye.execute.tool.*"},
		Bundle: "sha256:ab", Inputs: map[string]any{"level": "1"}, Queue: "q", Ancestors: []string{},
		CreatedAt: rec.CreatedAt, UpdatedAt: rec.CreatedAt, Version: 1, Kind: KindThread,
		Tenant: thread.DefaultTenant, Priority: thread.DefaultPriority,
	}
	if diff := cmp.Diff(want, rec); diff != "" {
		t.Fatalf("registered record (-want +got):\n%s", diff)
	}
	if rec.CreatedAt.IsZero() || !rec.CreatedAt.Equal(time.Date(2026, 2, 17, 10, 0, 56, 1e6, time.UTC)) {
		t.Fatalf("created_at %v is not from the injected clock", rec.CreatedAt)
	}
	if diff := cmp.Diff(rec, f.get(t, "root-1")); diff != "" {
		t.Fatalf("Get (-register +get):\n%s", diff)
	}
	if _, err := f.reg.Register(f.ctx, NewThread{ThreadID: "root-1"}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := f.reg.Register(f.ctx, NewThread{ThreadID: "orphan", ParentID: "nope"}); !errors.Is(err, ErrParentNotFound) {
		t.Fatalf("missing parent: %v", err)
	}
	if _, err := f.reg.Get(f.ctx, "orphan"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("refused thread was registered: %v", err)
	}
	if _, err := f.reg.Register(f.ctx, NewThread{}); err == nil {
		t.Fatal("empty id accepted")
	}

	child := f.register(t, "child-1", "root-1")
	grand := f.register(t, "grand-1", "child-1")
	if child.ParentID != "root-1" || child.Depth != 1 || !cmp.Equal(child.Ancestors, []string{"root-1"}) {
		t.Fatalf("child %+v", child)
	}
	if grand.Depth != 2 || !cmp.Equal(grand.Ancestors, []string{"root-1", "child-1"}) {
		t.Fatalf("grandchild ancestors %v depth %d", grand.Ancestors, grand.Depth)
	}
	if got := grand.BudgetPath(); !cmp.Equal(got, []string{"child-1", "root-1"}) {
		t.Fatalf("BudgetPath %v", got)
	}
	recs, err := f.reg.GetMany(f.ctx, []string{"grand-1", "missing", "root-1"})
	if err != nil || len(recs) != 2 || recs[0].ThreadID != "grand-1" || recs[1].ThreadID != "root-1" {
		t.Fatalf("GetMany: %v %v", recs, err)
	}
	kids, err := f.reg.ListChildren(f.ctx, "root-1")
	if err != nil || len(kids) != 1 || kids[0].ThreadID != "child-1" {
		t.Fatalf("ListChildren: %v %v", kids, err)
	}
}

func TestRecordJSON(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "j", "")
	rec := f.get(t, "j")
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"parent_id", "continuation_of", "continuation_thread_id", "error"} {
		if v, ok := m[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null", k, v, ok)
		}
	}
	for _, k := range []string{"thread_id", "directive", "status", "chain_root_id", "result", "outputs", "cost", "limits"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s missing from %s", k, b)
		}
	}
	// A created thread has not started: no started_at (not year 1).
	if v, ok := m["started_at"]; ok {
		t.Errorf("started_at = %v in the JSON of a created thread", v)
	}
	var back Record
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(rec, &back, cmpopts.EquateEmpty()); diff != "" {
		t.Fatalf("round trip (-want +got):\n%s", diff)
	}
}

func TestTransition(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "a", "")
	v, err := f.reg.Transition(f.ctx, "a", thread.StatusRunning, 1)
	if err != nil || v != 2 {
		t.Fatalf("created→running: %d %v", v, err)
	}
	// Stale version: typed conflict, nothing changes.
	_, err = f.reg.Transition(f.ctx, "a", thread.StatusCompleted, 1)
	var ce *ConflictError
	if !errors.As(err, &ce) || !errors.Is(err, ErrConflict) || ce.Expected != 1 || ce.Actual != 2 || ce.ThreadID != "a" {
		t.Fatalf("stale: %v", err)
	}
	if rec := f.get(t, "a"); rec.Status != thread.StatusRunning || rec.Version != 2 {
		t.Fatalf("after conflict: %s v%d", rec.Status, rec.Version)
	}
	// Forbidden transition: typed, nothing changes.
	_, err = f.reg.Transition(f.ctx, "a", thread.StatusCreated, 0)
	var te *thread.TransitionError
	if !errors.As(err, &te) || te.From != thread.StatusRunning || te.To != thread.StatusCreated {
		t.Fatalf("running→created: %v", err)
	}
	if _, err := f.reg.Transition(f.ctx, "a", "bogus", 0); err == nil {
		t.Fatal("unknown status accepted")
	}
	if err := f.reg.UpdateStatus(f.ctx, "a", thread.StatusCompleted); err != nil {
		t.Fatal(err)
	}
	active, err := f.reg.ListActive(f.ctx)
	if err != nil || len(active) != 0 {
		t.Fatalf("terminal thread still active: %v %v", active, err)
	}
	if err := f.reg.UpdateStatus(f.ctx, "a", thread.StatusRunning); !errors.As(err, &te) {
		t.Fatalf("completed→running: %v", err)
	}
	if err := f.reg.UpdateStatus(f.ctx, "missing", thread.StatusRunning); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

// TestTransitionTableInLua drives every (from, to) pair through the Lua
// script and requires exactly thread's table (registry.lua's TRANS and
// TERMINAL).
func TestTransitionTableInLua(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	for _, from := range thread.Statuses {
		for _, to := range thread.Statuses {
			if from == to {
				continue
			}
			id := fmt.Sprintf("%s-%s", from, to)
			f.register(t, id, "")
			// Force the starting status directly (test-only shortcut).
			if err := f.r.Client.HSet(f.ctx, f.ks.Thread(id), "status", string(from)).Err(); err != nil {
				t.Fatal(err)
			}
			_, err := f.reg.Transition(f.ctx, id, to, 0)
			if thread.CanTransition(from, to) != (err == nil) {
				t.Errorf("%s → %s: err %v, table says %v", from, to, err, thread.CanTransition(from, to))
			}
			// And its terminal set: a terminal status leaves the active set.
			if active := f.r.Client.SIsMember(f.ctx, f.ks.Active(id), id).Val(); err == nil && active == to.Terminal() {
				t.Errorf("%s → %s: in the active set %v, terminal %v", from, to, active, to.Terminal())
			}
		}
	}
}

func TestCommit(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "w", "")
	lease := f.claim(t, "w")
	res, model := "done", "m2"
	cost := thread.Cost{Turns: 3, InputTokens: 10, OutputTokens: 5, Spend: 0.02}
	lim := thread.Resolved{Turns: 5}
	ch := Changes{Status: thread.StatusCompleted, Cost: &cost, Result: &res, Outputs: map[string]any{"n": "15"},
		Error: &ErrorInfo{Code: "x", Message: "y"}, Model: &model, Capabilities: []string{"a"}, Limits: &lim,
		Fields: map[string]string{"transcript_seq": "4"}}
	v, err := f.reg.Commit(f.ctx, "w", lease.Version, ch)
	if err != nil || v != lease.Version+1 {
		t.Fatalf("commit: %d %v", v, err)
	}
	got := f.get(t, "w")
	if got.Status != thread.StatusCompleted || got.Cost != cost || got.Result != "done" || got.Outputs["n"] != "15" ||
		*got.Error != (ErrorInfo{Code: "x", Message: "y"}) || got.Model != "m2" || !cmp.Equal(got.Capabilities, []string{"a"}) ||
		got.Limits != lim || got.Extra["transcript_seq"] != "4" || got.Version != v {
		t.Fatalf("committed record %+v", got)
	}
	// A stale commit changes nothing, not even the fields.
	other := "other"
	if _, err := f.reg.Commit(f.ctx, "w", lease.Version, Changes{Result: &other}); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale: %v", err)
	}
	if got := f.get(t, "w"); got.Result != "done" || got.Version != v {
		t.Fatalf("stale commit changed the record: %+v", got)
	}
	// A forbidden transition changes no field either.
	if _, err := f.reg.Commit(f.ctx, "w", v, Changes{Status: thread.StatusRunning, Result: &other}); err == nil {
		t.Fatal("completed→running committed")
	}
	if got := f.get(t, "w"); got.Result != "done" || got.Version != v {
		t.Fatalf("refused commit changed the record: %+v", got)
	}
	if _, err := f.reg.Commit(f.ctx, "w", 0, Changes{Fields: map[string]string{"version": "99"}}); err == nil {
		t.Fatal("protected field writable")
	}
	if err := f.reg.SetResult(f.ctx, "w", "final", map[string]any{"k": "v"}); err != nil {
		t.Fatal(err)
	}
	if got := f.get(t, "w"); got.Result != "final" || got.Outputs["k"] != "v" {
		t.Fatalf("SetResult: %+v", got)
	}
	nv, err := f.reg.UpdateCostSnapshot(f.ctx, "w", f.get(t, "w").Version, thread.Cost{Turns: 9})
	if err != nil || f.get(t, "w").Cost.Turns != 9 || f.get(t, "w").Version != nv {
		t.Fatalf("UpdateCostSnapshot: %v", err)
	}
	if _, err := f.reg.UpdateCostSnapshot(f.ctx, "w", nv-1, thread.Cost{Turns: 1}); !errors.Is(err, ErrConflict) {
		t.Fatalf("stale cost snapshot: %v", err)
	}
}

// TestClaimCommitRace: two goroutines that hold the same version race to
// commit; exactly one wins. Workers racing to claim the same activation
// (a task asynq delivered twice, a lapsed lease two recoverers saw):
// exactly one claims, and only its commits land.
func TestClaimCommitRace(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	for round := range 20 {
		id := fmt.Sprintf("race-%d", round)
		f.register(t, id, "")
		lease := f.claim(t, id)
		var wins, conflicts atomic.Int32
		together(2, func(g int) {
			res := fmt.Sprint("writer ", g)
			_, err := f.reg.Commit(f.ctx, id, lease.Version, Changes{Result: &res, Status: thread.StatusCompleted})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, ErrConflict):
				conflicts.Add(1)
			default:
				t.Error(err)
			}
		})
		if wins.Load() != 1 || conflicts.Load() != 1 {
			t.Fatalf("round %d: %d wins, %d conflicts", round, wins.Load(), conflicts.Load())
		}
	}
	// Claims race: a start task delivered to two workers, then, once the
	// winner's lease has lapsed, two recoverers of the version they saw.
	for round := range 10 {
		id := fmt.Sprintf("claims-%d", round)
		f.register(t, id, "")
		race := func(reason string, seq int64) (won Claim, lost int) {
			t.Helper()
			var mu sync.Mutex
			together(4, func(g int) {
				c, err := f.acts.Claim(f.ctx, id, reason, seq, fmt.Sprint("tok", g), queue.TaskID(queue.Activation{ThreadID: id, Reason: reason}, seq), time.Minute)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil:
					won = c
				case errors.Is(err, ErrNotClaimable):
					lost++
				default:
					t.Error(err)
				}
			})
			if lost != 3 {
				t.Fatalf("round %d, %s: %d of 4 claimers refused, want 3", round, reason, lost)
			}
			return won, lost
		}
		first, _ := race("start", 0)
		require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Lease(id)).Err()) // its worker died
		second, _ := race("recover", first.Version)
		if _, err := f.reg.Commit(f.ctx, id, first.Version, Changes{Fields: map[string]string{"x": "1"}}); !errors.Is(err, ErrConflict) {
			t.Fatalf("round %d: the first claimer committed after a takeover: %v", round, err)
		}
		if _, err := f.reg.Commit(f.ctx, id, second.Version, Changes{Fields: map[string]string{"x": "2"}}); err != nil {
			t.Fatalf("round %d: the claimer holding the thread: %v", round, err)
		}
	}
}

// TestCompletedNeverRunning: 20 goroutines race to take over (its lease
// lapsed), transition and commit a thread that completes in the middle;
// once it is completed it is never running again.
func TestCompletedNeverRunning(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	for round := range 5 {
		id := fmt.Sprintf("done-%d", round)
		f.register(t, id, "")
		lease := f.claim(t, id)
		require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Lease(id)).Err())
		var completed atomic.Bool
		together(20, func(g int) {
			switch g % 4 {
			case 0:
				if _, err := f.reg.Transition(f.ctx, id, thread.StatusCompleted, lease.Version); err == nil {
					completed.Store(true)
				}
			case 1:
				_, _ = f.acts.Claim(f.ctx, id, "recover", lease.Version, fmt.Sprint("tok", g), fmt.Sprint(id, "@recover-", g), time.Minute)
			case 2:
				_ = f.reg.UpdateStatus(f.ctx, id, thread.StatusRunning)
			case 3:
				_ = f.reg.UpdateStatus(f.ctx, id, thread.StatusWaiting)
			}
		})
		// Whatever happened, finish it and then hammer it again.
		if err := f.reg.UpdateStatus(f.ctx, id, thread.StatusCompleted); err != nil && !errors.As(err, new(*thread.TransitionError)) {
			t.Fatal(err)
		}
		if f.get(t, id).Status != thread.StatusCompleted {
			// waiting → completed is not allowed: run it and complete.
			if err := f.reg.UpdateStatus(f.ctx, id, thread.StatusRunning); err != nil {
				t.Fatal(err)
			}
			if err := f.reg.UpdateStatus(f.ctx, id, thread.StatusCompleted); err != nil {
				t.Fatal(err)
			}
		}
		require.NoError(t, f.r.Client.Del(f.ctx, f.ks.Lease(id)).Err())
		v := f.get(t, id).Version
		together(20, func(g int) {
			var err error
			reason := []string{"start", "requeue", "wake", "timeout", "recover"}[g%5]
			if g%2 == 0 {
				_, err = f.acts.Claim(f.ctx, id, reason, v, fmt.Sprint("tok", g), id, time.Minute)
			} else {
				err = f.reg.UpdateStatus(f.ctx, id, thread.StatusRunning)
			}
			if err == nil {
				t.Errorf("round %d: a completed thread was made running", round)
			}
		})
		if st := f.get(t, id).Status; st != thread.StatusCompleted {
			t.Fatalf("round %d: status %s", round, st)
		}
	}
}

func TestSpawns(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	const limit = 10
	var ok, refused atomic.Int32
	together(50, func(int) {
		n, err := f.reg.IncrSpawns(f.ctx, "p", limit)
		switch {
		case err == nil:
			if n < 1 || n > limit {
				t.Errorf("count %d", n)
			}
			ok.Add(1)
		case errors.Is(err, &thread.LimitError{Code: thread.CodeSpawnsExceeded}):
			refused.Add(1)
		default:
			t.Error(err)
		}
	})
	if ok.Load() != limit || refused.Load() != 50-limit {
		t.Fatalf("%d accepted, %d refused", ok.Load(), refused.Load())
	}
	if n, _ := f.r.Client.Get(f.ctx, f.ks.Spawns("p")).Int(); n != limit {
		t.Fatalf("counter %d, want %d", n, limit)
	}
	if n, err := f.reg.IncrSpawns(f.ctx, "q", -1); err != nil || n != 1 {
		t.Fatalf("unlimited: %d %v", n, err)
	}
	if _, err := f.reg.IncrSpawns(f.ctx, "z", 0); err == nil {
		t.Fatal("limit 0 allowed a spawn")
	}
	// A spawn given back (the child was not started) can be used again.
	if err := f.reg.UndoSpawn(f.ctx, "p"); err != nil {
		t.Fatal(err)
	}
	if n, err := f.reg.IncrSpawns(f.ctx, "p", limit); err != nil || n != limit {
		t.Fatalf("after undo: %d %v", n, err)
	}
	if _, err := f.reg.IncrSpawns(f.ctx, "p", limit); err == nil {
		t.Fatal("limit passed after undo")
	}
	if err := f.reg.UndoSpawn(f.ctx, "none"); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.r.Client.Get(f.ctx, f.ks.Spawns("none")).Int(); n != 0 {
		t.Fatalf("undo below zero: %d", n)
	}
}

func TestCancelFlag(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "x", "")
	sub, err := f.reg.SubscribeControl(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	status, err := f.reg.Subscribe(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer status.Close()
	if on, err := f.reg.CancelRequested(f.ctx, "x"); err != nil || on {
		t.Fatalf("before: %v %v", on, err)
	}
	if err := f.reg.RequestCancel(f.ctx, "x", true); err != nil {
		t.Fatal(err)
	}
	if on, err := f.reg.CancelRequested(f.ctx, "x"); err != nil || !on {
		t.Fatalf("after: %v %v", on, err)
	}
	if ev := <-sub.C; ev != (StatusEvent{ThreadID: "x", Status: "cancel"}) {
		t.Fatalf("event %+v", ev)
	}
	if rec := f.get(t, "x"); !rec.CancelRequested || rec.Version != 1 {
		t.Fatalf("record %+v", rec)
	}
	// The request is on the events channel too (for workers of earlier
	// versions); a status change is there only, not on the control one.
	if ev := <-status.C; ev != (StatusEvent{ThreadID: "x", Status: "cancel"}) {
		t.Fatalf("events channel: %+v", ev)
	}
	if err := f.reg.UpdateStatus(f.ctx, "x", thread.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	if ev := <-status.C; ev != (StatusEvent{ThreadID: "x", Status: "cancelled"}) {
		t.Fatalf("status event %+v", ev)
	}
	select {
	case ev := <-sub.C:
		t.Fatalf("a status change on the control channel: %+v", ev)
	case <-time.After(50 * time.Millisecond):
	}
	if err := f.reg.RequestCancel(f.ctx, "nope", true); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	if _, err := f.reg.CancelRequested(f.ctx, "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
}

func TestSubscribeEvents(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	sub, err := f.reg.Subscribe(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.register(t, "e", "")
	f.claim(t, "e")
	if err := f.reg.UpdateStatus(f.ctx, "e", thread.StatusCompleted); err != nil {
		t.Fatal(err)
	}
	want := []StatusEvent{{"e", "running"}, {"e", "completed"}}
	for _, w := range want {
		if ev := <-sub.C; ev != w {
			t.Fatalf("event %+v, want %+v", ev, w)
		}
	}
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := <-sub.C; ok {
		t.Fatal("C not closed")
	}
	_ = sub.Close() // twice is fine
}

func TestList(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "r1", "")
	f.register(t, "k1", "r1")
	f.register(t, "k2", "r1")
	if _, err := f.reg.Register(f.ctx, NewThread{ThreadID: "o1", Directive: "other"}); err != nil {
		t.Fatal(err)
	}
	for _, nt := range []NewThread{{ThreadID: "a1", Directive: "other", Tenant: "acme"}, {ThreadID: "a2", Directive: "test/d", ParentID: "a1", Tenant: "acme"},
		{ThreadID: "b1", Directive: "other", Tenant: "beta", Priority: 1}} {
		if _, err := f.reg.Register(f.ctx, nt); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.reg.UpdateStatus(f.ctx, "k1", thread.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	ids := func(recs []*Record, err error) []string {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, r := range recs {
			out = append(out, r.ThreadID)
		}
		return out
	}
	tests := []struct {
		f    Filter
		want []string
	}{
		{Filter{}, []string{"b1", "a2", "a1", "o1", "k2", "k1", "r1"}},
		{Filter{Limit: 2}, []string{"b1", "a2"}},
		{Filter{Directive: "other"}, []string{"b1", "a1", "o1"}},
		{Filter{Status: thread.StatusCancelled}, []string{"k1"}},
		{Filter{Parent: "r1"}, []string{"k2", "k1"}},
		{Filter{Parent: "r1", Status: thread.StatusCreated}, []string{"k2"}},
		{Filter{Tenant: "acme"}, []string{"a2", "a1"}},
		{Filter{Tenant: "acme", Limit: 1}, []string{"a2"}},
		{Filter{Tenant: "acme", Directive: "other"}, []string{"a1"}},
		{Filter{Tenant: "acme", Status: thread.StatusCreated}, []string{"a2", "a1"}},
		{Filter{Tenant: "beta"}, []string{"b1"}},
		{Filter{Tenant: thread.DefaultTenant}, []string{"o1", "k2", "k1", "r1"}},
		{Filter{Tenant: "nobody"}, nil},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, ids(f.reg.List(f.ctx, tt.f))); diff != "" {
			t.Errorf("List(%+v) (-want +got):\n%s", tt.f, diff)
		}
	}
	if diff := cmp.Diff([]string{"r1", "k2", "o1", "a1", "a2", "b1"}, ids(f.reg.ListActive(f.ctx))); diff != "" {
		t.Errorf("ListActive (-want +got):\n%s", diff)
	}
}

// TestRegisterReturnsTheStoredRecord: the record Register builds without
// reading it back is the one Get reads, for roots, children, grandchildren
// and continuations, with inputs of every JSON kind.
func TestRegisterReturnsTheStoredRecord(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	lim := thread.DefaultLimits()
	lim.Spend = 0.125
	for _, nt := range []NewThread{
		{ThreadID: "root", Directive: "t/a", Limits: lim},
		{ThreadID: "kid", Directive: "t/b", ParentID: "root", Limits: lim, Model: "m", Capabilities: []string{"rye.execute.tool.*"},
			Bundle: "digest", Queue: "low", Inputs: map[string]any{"n": 2, "f": 1.5, "s": "x<y>&", "l": []any{1, "a"}, "m": map[string]any{"k": nil}, "b": true}},
		{ThreadID: "grandkid", Directive: "t/c", ParentID: "kid", Limits: lim},
		{ThreadID: "cont", Directive: "t/a", PreviousThreadID: "root", ChainRootID: "root", ContinuationOf: "root", ChainIndex: 1,
			ContinuationKind: "resume", ContinuationMessage: "go on", Limits: lim, Inputs: map[string]any{}},
	} {
		rec, err := f.reg.Register(f.ctx, nt)
		require.NoError(t, err, nt.ThreadID)
		got := f.get(t, nt.ThreadID)
		require.Equal(t, got, rec, nt.ThreadID)
	}
	require.Equal(t, []string{"root", "kid"}, f.get(t, "grandkid").Ancestors)
	require.Equal(t, 2, f.get(t, "grandkid").Depth)
	acme, err := f.reg.Register(f.ctx, NewThread{ThreadID: "acme-root", Directive: "t/a", Limits: lim, Tenant: "acme", Priority: 1,
		IdempotencyKey: "order-7", ConcurrencyKeys: []ConcurrencyKey{{Rule: "per_customer", Value: "c1"}}})
	require.NoError(t, err)
	require.Equal(t, f.get(t, "acme-root"), acme)
	require.Equal(t, "acme", acme.Tenant)
	require.Equal(t, 1, acme.Priority)
	require.Equal(t, thread.DefaultTenant, f.get(t, "root").Tenant, "no tenant: the default tenant")
	require.Equal(t, thread.DefaultPriority, f.get(t, "root").Priority)
}

// TestForgetRefusals: Forget refuses a thread that is not finished and a
// record read before it changed, deletes a finished one as read, and
// says so of one already gone.
func TestForgetRefusals(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	_, err := f.reg.Register(f.ctx, NewThread{ThreadID: "fg", Directive: "test/d", Limits: thread.DefaultLimits(), Tenant: "acme"})
	require.NoError(t, err)
	running := f.claim(t, "fg")
	var te *thread.TransitionError
	require.ErrorAs(t, f.reg.Forget(f.ctx, running), &te)
	require.Equal(t, thread.StatusRunning, te.From)
	_, err = f.reg.Commit(f.ctx, "fg", running.Version, Changes{Status: thread.StatusCompleted})
	require.NoError(t, err)
	stale := *running
	stale.Status = thread.StatusCompleted
	require.ErrorIs(t, f.reg.Forget(f.ctx, &stale), ErrConflict, "read before the commit")
	done := f.get(t, "fg")
	require.Equal(t, int64(1), f.r.Client.ZCard(f.ctx, f.ks.TenantThreads("acme", "fg")).Val())
	require.NoError(t, f.reg.Forget(f.ctx, done))
	_, err = f.reg.Get(f.ctx, "fg")
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, int64(0), f.r.Client.Exists(f.ctx, f.ks.TenantThreads("acme", "fg")).Val(), "out of its tenant's index")
	require.ErrorIs(t, f.reg.Forget(f.ctx, done), ErrNotFound)
}
