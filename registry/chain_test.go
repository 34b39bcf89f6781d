package registry

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/thread"
)

// chainABC builds A (continued) → B (continued) → C (running) by handoffs.
func chainABC(t *testing.T, f regFixture) {
	t.Helper()
	f.register(t, "A", "")
	f.claim(t, "A")
	for _, step := range [][2]string{{"A", "B"}, {"B", "C"}} {
		f.register(t, step[1], "")
		f.claim(t, step[1])
		if _, _, err := f.reg.LinkContinuation(f.ctx, step[0], step[1]); err != nil {
			t.Fatal(err)
		}
	}
}

func TestChainLinkAndResolve(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	chainABC(t, f)
	a, b, c := f.get(t, "A"), f.get(t, "B"), f.get(t, "C")
	if a.Status != thread.StatusContinued || a.ContinuationThreadID != "B" || a.ChainRootID != "A" {
		t.Fatalf("A %+v", a)
	}
	if b.Status != thread.StatusContinued || b.ContinuationOf != "A" || b.ContinuationThreadID != "C" || b.ChainRootID != "A" || b.PreviousThreadID != "A" {
		t.Fatalf("B %+v", b)
	}
	if c.Status != thread.StatusRunning || c.ContinuationOf != "B" || c.ChainRootID != "A" {
		t.Fatalf("C %+v", c)
	}
	for _, id := range []string{"A", "B", "C"} {
		got, err := f.reg.ResolveChain(f.ctx, id)
		if err != nil || got != "C" {
			t.Errorf("ResolveChain(%s) = %s, %v", id, got, err)
		}
		chain, err := f.reg.GetChain(f.ctx, id)
		if err != nil || len(chain) != 3 || chain[0].ThreadID != "A" || chain[2].ThreadID != "C" {
			t.Errorf("GetChain(%s) = %v, %v", id, chain, err)
		}
	}
	if got, _ := f.reg.ResolveChain(f.ctx, "unknown"); got != "unknown" {
		t.Errorf("ResolveChain(unknown) = %s", got)
	}
	// Relinking the same pair is a no-op; another link is refused.
	if _, _, err := f.reg.LinkContinuation(f.ctx, "A", "B"); err != nil {
		t.Fatalf("relink: %v", err)
	}
	f.register(t, "D", "")
	if _, _, err := f.reg.LinkContinuation(f.ctx, "A", "D"); !errors.Is(err, ErrChainLinked) {
		t.Fatalf("second link from A: %v", err)
	}
	if _, _, err := f.reg.LinkContinuation(f.ctx, "D", "A"); !errors.Is(err, ErrChainLinked) {
		t.Fatalf("link into a thread that has a continuation: %v", err)
	}
	if _, _, err := f.reg.LinkContinuation(f.ctx, "D", "D"); !errors.Is(err, ErrChainLinked) {
		t.Fatalf("self link: %v", err)
	}
	// D is created: it cannot be continued.
	f.register(t, "E", "")
	var te *thread.TransitionError
	if _, _, err := f.reg.LinkContinuation(f.ctx, "D", "E"); !errors.As(err, &te) {
		t.Fatalf("continue a created thread: %v", err)
	}
	if _, _, err := f.reg.LinkContinuation(f.ctx, "D", "nope"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("link to missing: %v", err)
	}
}

// TestResumeMarksContinued: linking from a finished thread (user resume)
// sets the pointer and moves it to continued, as the spec's
// set_continuation does, so ResolveChain reaches the resumed thread; the
// result and error stay.
func TestResumeMarksContinued(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "old", "")
	f.claim(t, "old")
	if _, err := f.reg.Commit(f.ctx, "old", 0, Changes{Status: thread.StatusError, Error: &ErrorInfo{Code: "provider_error", Message: "boom"}}); err != nil {
		t.Fatal(err)
	}
	f.register(t, "new", "")
	if _, err := f.reg.SetContinuation(f.ctx, "old", "new"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.reg.SetChainInfo(f.ctx, "new", "old", "old"); err != nil {
		t.Fatal(err)
	}
	old := f.get(t, "old")
	if old.Status != thread.StatusContinued || old.ContinuationThreadID != "new" {
		t.Fatalf("old %+v", old)
	}
	if old.Error == nil || old.Error.Code != "provider_error" {
		t.Fatalf("old lost its error: %+v", old.Error)
	}
	chain, err := f.reg.GetChain(f.ctx, "new")
	if err != nil || len(chain) != 2 || chain[0].ThreadID != "old" {
		t.Fatalf("chain %v %v", chain, err)
	}
	if got, _ := f.reg.ResolveChain(f.ctx, "old"); got != "new" {
		t.Fatalf("resolve %s, want new", got)
	}
	// A continued thread cannot be linked to a second continuation.
	f.register(t, "other", "")
	if _, err := f.reg.SetContinuation(f.ctx, "old", "other"); !errors.Is(err, ErrChainLinked) {
		t.Fatalf("second link: %v", err)
	}
	if _, err := f.reg.SetChainInfo(f.ctx, "new", "", "old"); err == nil {
		t.Fatal("empty root accepted")
	}
}

// TestChainCycleGuard corrupts a chain into a loop: resolve and get-chain
// terminate.
func TestChainCycleGuard(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	chainABC(t, f)
	// Corrupt: C continued back to A.
	if err := f.r.Client.HSet(f.ctx, f.ks.Thread("C"), "status", "continued", "continuation_thread_id", "A").Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.r.Client.HSet(f.ctx, f.ks.Thread("A"), "continuation_of", "C").Err(); err != nil {
		t.Fatal(err)
	}
	got, err := f.reg.ResolveChain(f.ctx, "A")
	if err != nil || got != "A" {
		t.Fatalf("ResolveChain on a cycle = %q, %v; want A (the first id seen twice)", got, err)
	}
	chain, err := f.reg.GetChain(f.ctx, "B")
	if err != nil || len(chain) != 3 {
		t.Fatalf("GetChain on a cycle: %d records, %v", len(chain), err)
	}
	ctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
	defer cancel()
	recs, err := f.reg.WaitTerminal(ctx, []string{"A"})
	if err != nil || recs["A"] == nil {
		t.Fatalf("WaitTerminal on a cycle: %v %v", recs, err)
	}
}

// TestWaitTerminal: a waiter on A is woken when the chain A → B → C ends,
// and gets C's record keyed by A. The safety poll is set to an hour so
// only the published events can wake it.
func TestWaitTerminal(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.reg.poll = time.Hour
	f.register(t, "A", "")
	f.register(t, "X", "")
	f.claim(t, "A")
	if err := f.reg.UpdateStatus(f.ctx, "X", thread.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	type result struct {
		recs map[string]*Record
		err  error
	}
	out := make(chan result, 1)
	ctx, cancel := context.WithTimeout(f.ctx, 30*time.Second)
	defer cancel()
	go func() {
		recs, err := f.reg.WaitTerminal(ctx, []string{"A", "X"})
		out <- result{recs, err}
	}()
	// Hand off twice and complete, while the waiter waits.
	for _, step := range [][2]string{{"A", "B"}, {"B", "C"}} {
		f.register(t, step[1], "")
		f.claim(t, step[1])
		if _, _, err := f.reg.LinkContinuation(f.ctx, step[0], step[1]); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case r := <-out:
		t.Fatalf("returned before C finished: %v %v", r.recs, r.err)
	default:
	}
	res := "hello"
	if _, err := f.reg.Commit(f.ctx, "C", 0, Changes{Status: thread.StatusCompleted, Result: &res}); err != nil {
		t.Fatal(err)
	}
	r := <-out
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.recs["A"] == nil || r.recs["A"].ThreadID != "C" || r.recs["A"].Result != "hello" {
		t.Fatalf("A resolved to %+v", r.recs["A"])
	}
	if r.recs["X"] == nil || r.recs["X"].Status != thread.StatusCancelled {
		t.Fatalf("X %+v", r.recs["X"])
	}
	if _, err := f.reg.WaitTerminal(ctx, []string{"missing"}); !errors.Is(err, ErrNotFound) {
		t.Fatalf("missing: %v", err)
	}
	// A context that ends returns what finished so far and the error.
	short, cancel2 := context.WithTimeout(f.ctx, 50*time.Millisecond)
	defer cancel2()
	f.register(t, "slow", "")
	recs, err := f.reg.WaitTerminal(short, []string{"X", "slow"})
	if !errors.Is(err, context.DeadlineExceeded) || recs["X"] == nil || recs["slow"] != nil {
		t.Fatalf("timeout: %v %v", recs, err)
	}
}

// readCounter counts the thread records a client reads (HGETALL) one at a
// time (n) and in pipelines (batched), and the statuses it probes in
// pipelines (HGET).
type readCounter struct{ n, batched, probes atomic.Int64 }

func (c *readCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *readCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "hgetall" {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *readCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			switch cmd.Name() {
			case "hget":
				c.probes.Add(1)
			case "hgetall":
				c.batched.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// countedRegistry is a Registry over f's Redis through a client of its
// own whose reads are counted.
func countedRegistry(t *testing.T, f regFixture) (*Registry, *readCounter) {
	t.Helper()
	opt, err := redis.ParseURL(f.r.URL)
	require.NoError(t, err)
	counted := redis.NewClient(opt)
	t.Cleanup(func() { _ = counted.Close() })
	reads := &readCounter{}
	counted.AddHook(reads)
	reg, err := New(Config{Client: counted, Keys: f.ks, Now: f.clock.Now, SafetyPoll: time.Hour})
	require.NoError(t, err)
	return reg, reads
}

// TestWaitTerminalEndedBeforeReadsInPipelines: threads that ended before
// the wait began are probed and read in pipelines, none alone.
func TestWaitTerminalEndedBeforeReadsInPipelines(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	waiter, reads := countedRegistry(t, f)
	const n = 600 // more than one probe's batch
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("e%03d", i)
		f.register(t, ids[i], "")
		f.claim(t, ids[i])
		_, err := f.reg.Commit(f.ctx, ids[i], 0, Changes{Status: thread.StatusCompleted, Result: new("r " + ids[i])})
		require.NoError(t, err)
	}
	recs, err := waiter.WaitTerminal(f.ctx, ids)
	require.NoError(t, err)
	require.Len(t, recs, n)
	for _, id := range ids {
		require.Equal(t, thread.StatusCompleted, recs[id].Status)
		require.Equal(t, "r "+id, recs[id].Result)
	}
	require.Equal(t, int64(0), reads.n.Load(), "records read one at a time")
	require.Equal(t, int64(n), reads.batched.Load())
	require.Equal(t, int64(n), reads.probes.Load())
}

// TestWaitTerminalManyReadsPerEvent: waiting on many threads probes their
// statuses in pipelines and reads in full, for each event, the ids the
// event is about, not every pending id (which made a wait on n threads
// cost n² reads).
func TestWaitTerminalManyReadsPerEvent(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	opt, err := redis.ParseURL(f.r.URL)
	if err != nil {
		t.Fatal(err)
	}
	counted := redis.NewClient(opt)
	defer counted.Close()
	reads := &readCounter{}
	counted.AddHook(reads)
	waiter, err := New(Config{Client: counted, Keys: f.ks, Now: f.clock.Now, SafetyPoll: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%03d", i)
		f.register(t, ids[i], "")
	}
	out := make(chan error, 1)
	var recs map[string]*Record
	ctx, cancel := context.WithTimeout(f.ctx, 60*time.Second)
	defer cancel()
	go func() {
		var err error
		recs, err = waiter.WaitTerminal(ctx, ids)
		out <- err
	}()
	for reads.probes.Load() < n { // the first probe of every id
		time.Sleep(5 * time.Millisecond)
	}
	if got := reads.n.Load(); got != 0 {
		t.Fatalf("%d full reads of threads none of which has ended", got)
	}
	for _, id := range ids {
		f.claim(t, id)
		if _, err := f.reg.Commit(f.ctx, id, 0, Changes{Status: thread.StatusCompleted}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond) // threads finish over time, not all at once
	}
	if err := <-out; err != nil {
		t.Fatal(err)
	}
	if len(recs) != n {
		t.Fatalf("%d of %d finished", len(recs), n)
	}
	// At most one full read per event that a thread ended, and the probes
	// of the first reading (the safety poll's is an hour away).
	if got := reads.n.Load() + reads.batched.Load(); got > n {
		t.Fatalf("%d record reads for %d threads that ended once each: want at most %d", got, n, n)
	}
	if got := reads.probes.Load(); got != n {
		t.Fatalf("%d status probes for %d threads: want one each", got, n)
	}
}

// TestLinkLeavesAClaimedContinuationAlone: a continuation registered with
// its chain fields (as orchestrator.Start registers one) may be claimed
// before the link lands; the link writes nothing to it then, so its
// worker's version still holds. One registered without them is written
// and its version bumped.
func TestLinkLeavesAClaimedContinuationAlone(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	f.register(t, "old", "")
	f.claim(t, "old")
	_, err := f.reg.Register(f.ctx, NewThread{ThreadID: "new", Directive: "test/d", Limits: thread.DefaultLimits(),
		ChainRootID: "old", ContinuationOf: "old", PreviousThreadID: "old", ContinuationKind: "resume"})
	require.NoError(t, err)
	claimed := f.claim(t, "new")
	_, nv, err := f.reg.LinkContinuation(f.ctx, "old", "new")
	require.NoError(t, err)
	require.Equal(t, claimed.Version, nv)
	_, err = f.reg.Commit(f.ctx, "new", claimed.Version, Changes{Status: thread.StatusCompleted})
	require.NoError(t, err, "the claimer's version holds after the link")

	f.register(t, "old2", "")
	f.claim(t, "old2")
	bare := f.register(t, "new2", "")
	_, nv, err = f.reg.LinkContinuation(f.ctx, "old2", "new2")
	require.NoError(t, err)
	require.Equal(t, bare.Version+1, nv)
	rec := f.get(t, "new2")
	require.Equal(t, "old2", rec.ContinuationOf)
	require.Equal(t, "old2", rec.ChainRootID)
	require.Equal(t, "old2", rec.PreviousThreadID)
}

// TestListActiveStatusesReadsActiveSet: listing the threads of a status
// that is not final reads the active threads' records only, not those of
// every thread ever registered, and finds what a full scan finds, newest
// first.
func TestListActiveStatusesReadsActiveSet(t *testing.T) {
	t.Parallel()
	f := setupRegistry(t)
	lister, reads := countedRegistry(t, f)
	const done = 300 // more than a page of the full scan
	for i := range done {
		id := fmt.Sprintf("d%03d", i)
		f.register(t, id, "")
		f.claim(t, id)
		_, err := f.reg.Commit(f.ctx, id, 0, Changes{Status: thread.StatusCompleted})
		require.NoError(t, err)
	}
	for _, id := range []string{"r1", "c1", "r2"} {
		f.register(t, id, "")
		if id[0] == 'r' {
			f.claim(t, id)
		}
	}
	ids := func(recs []*Record) (out []string) {
		for _, r := range recs {
			out = append(out, r.ThreadID)
		}
		return out
	}
	running, err := lister.List(f.ctx, Filter{Status: thread.StatusRunning})
	require.NoError(t, err)
	require.Equal(t, []string{"r2", "r1"}, ids(running), "newest first")
	created, err := lister.List(f.ctx, Filter{Status: thread.StatusCreated, Limit: 5})
	require.NoError(t, err)
	require.Equal(t, []string{"c1"}, ids(created))
	require.Equal(t, int64(6), reads.batched.Load(), "the three active records, twice")

	completed, err := lister.List(f.ctx, Filter{Status: thread.StatusCompleted, Limit: 2})
	require.NoError(t, err)
	require.Equal(t, []string{"d299", "d298"}, ids(completed))
}
