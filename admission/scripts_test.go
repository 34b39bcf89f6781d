package admission

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const t0 = int64(1_800_000_000_000)

func conf2() map[string]any {
	return map[string]any{"grant_ttl": 5000, "share_ttl": 3000, "rule:per_customer": 2}
}

func keyed(run string, p, c int, keys ...string) Request {
	return Request{Run: run, Queue: "default", Priority: p, Class: c, Keys: keys, Reason: "start"}
}

// TestPriorityThenClassThenArrival: the ready queue is ordered by
// (priority, class, arrival), so a priority-1 activation is granted at
// the tenant's next free slot however many lower ones wait (P3), and at
// equal priority a tree already started goes before a new root.
func TestPriorityThenClassThenArrival(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, conf2())
	st, _, _, gr := s.request(t0, "busy", keyed("busy", 3, 1), 16)
	require.Equal(t, "GRANTED", st)
	require.Equal(t, []string{"busy"}, gr)
	for i := range 200 {
		st, why, _, gr := s.request(t0, fmt.Sprintf("low%03d", i), keyed("low", 3, 1), 16)
		require.Equal(t, "PARKED", st)
		require.Equal(t, "capacity", why)
		require.Empty(t, gr)
	}
	s.request(t0, "child", keyed("child", 3, 0), 16)
	st, _, _, _ = s.request(t0, "urgent", keyed("urgent", 1, 1), 16)
	require.Equal(t, "PARKED", st)
	n, gr := s.release(t0+10, "busy", "", 16)
	require.Equal(t, int64(1), n)
	require.Equal(t, []string{"urgent"}, gr, "the priority-1 activation is next, before 200 priority-3 ones")
	_, gr = s.release(t0+20, "urgent", "", 16)
	require.Equal(t, []string{"child"}, gr, "then, at equal priority, the tree already started")
	_, gr = s.release(t0+30, "child", "", 16)
	require.Equal(t, []string{"low000"}, gr, "then the oldest new root")
}

// TestFullKeyParksOnlyItsValue: a full key parks its activations in its
// queue (waiting_for concurrency), never delays another value's, and its
// first waiter is granted when a slot of it frees.
func TestFullKeyParksOnlyItsValue(t *testing.T) {
	t.Parallel()
	s := newSlot(t, true, conf2())
	s.prov = 10
	for i := range 2 {
		st, _, _, _ := s.request(t0, fmt.Sprintf("c1-%d", i), keyed("r", 3, 1, "per_customer=c1"), 16)
		require.Equal(t, "GRANTED", st)
	}
	st, why, key, _ := s.request(t0, "c1-2", keyed("r", 3, 1, "per_customer=c1"), 16)
	require.Equal(t, []string{"PARKED", "concurrency", "per_customer=c1"}, []string{st, why, key})
	s.request(t0, "c1-3", keyed("r", 3, 1, "per_customer=c1"), 16)
	st, _, _, _ = s.request(t0, "c2-0", keyed("r", 3, 1, "per_customer=c2"), 16)
	require.Equal(t, "GRANTED", st, "another value is not delayed")
	require.Equal(t, "2", s.hash(6)["per_customer=c1"])
	require.Equal(t, "2", s.hash(7)["per_customer=c1"], "two wait on c1")

	w, ok := whereOf(t, s, "c1-3")
	require.True(t, ok)
	require.Equal(t, Where{State: StateKey, WaitingFor: WaitConcurrency, WaitKey: "per_customer=c1", Position: 2, KeyRunning: 2, KeyMax: 2}, w)

	v, _ := s.claim(t0+5, "c1-0", keyed("r", 3, 1, "per_customer=c1"), "tok", 3000, 16)
	require.Equal(t, "RUN", v)
	n, gr := s.release(t0+10, "c1-0", "tok", 16)
	require.Equal(t, int64(1), n)
	require.Equal(t, []string{"c1-2"}, gr, "the key's first waiter")
	require.Equal(t, "1", s.hash(7)["per_customer=c1"])
	n, _ = s.release(t0+11, "c1-0", "tok", 16)
	require.Equal(t, int64(0), n, "a second release finds nothing (I3)")
	require.Equal(t, "2", s.hash(6)["per_customer=c1"])
}

// whereOf runs adm_where.lua as Admitter.Where reads it.
func whereOf(t *testing.T, s *slot, a string) (Where, bool) {
	t.Helper()
	res, err := whereScript.Run(s.ctx, s.rdb, s.keys, a).Slice()
	require.NoError(t, err)
	ws := map[string]Where{}
	require.NoError(t, parseWheres(res, []string{a}, ws))
	w, ok := ws[a]
	w.Since = time.Time{} // the slot's clock: the test's t0
	return w, ok
}

// TestUnclaimedGrantReturnsToTheHead: a grant nobody claims within the
// grant TTL returns to the head of its class, counted reaped as granted,
// and its claim afterwards admits it afresh (11.3).
func TestUnclaimedGrantReturnsToTheHead(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, conf2())
	st, _, _, _ := s.request(t0, "a", keyed("a", 3, 1), 16)
	require.Equal(t, "GRANTED", st)
	s.request(t0+1, "b", keyed("b", 3, 1), 16)
	// The grant lapses: the next call reaps it, puts it first, and grants it again.
	st, _, _, gr := s.request(t0+6000, "c", keyed("c", 3, 1), 16)
	require.Equal(t, "PARKED", st)
	require.Equal(t, []string{"a"}, gr, "the lapsed grant is first in line again")
	require.Equal(t, "1", s.state()["reaped:granted"])
	v, _ := s.claim(t0+6001, "a", keyed("a", 3, 1), "tok", 3000, 16)
	require.Equal(t, "RUN", v)
	v, _ = s.claim(t0+6002, "b", keyed("b", 3, 1), "tok2", 3000, 16)
	require.Equal(t, "PARK", v, "no room: parked at claim")
	require.Equal(t, 1, s.entries()["b"].Epoch, "its next task gets a new id")
	v, _ = s.claim(t0+6003, "a", keyed("a", 3, 1), "other", 3000, 16)
	require.Equal(t, "BUSY", v, "a live activation holds it")
}

// TestReapRunningLease: a running activation whose lease lapsed (its
// worker died) is reaped once by the next script, its slots freed and its
// key's first waiter granted; its late release changes nothing.
func TestReapRunningLease(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, conf2())
	s.prov = 5
	s.request(t0, "a", keyed("a", 3, 1, "per_customer=c1"), 16)
	s.request(t0, "b", keyed("b", 3, 1, "per_customer=c1"), 16)
	st, why, _, _ := s.request(t0, "c", keyed("c", 3, 1, "per_customer=c1"), 16)
	require.Equal(t, []string{"PARKED", "concurrency"}, []string{st, why})
	v, _ := s.claim(t0+1, "a", keyed("a", 3, 1, "per_customer=c1"), "ta", 3000, 16)
	require.Equal(t, "RUN", v)
	v, _ = s.claim(t0+1, "b", keyed("b", 3, 1, "per_customer=c1"), "tb", 3000, 16)
	require.Equal(t, "RUN", v)
	r := s.renew(t0+2000, 0, 3000, [][3]string{{"b", "tb", ""}}, 16)
	require.Empty(t, r.Lost)
	// a's worker stopped renewing: at t0+3001 a is reaped, c granted.
	r = s.renew(t0+3500, 0, 3000, [][3]string{{"b", "tb", ""}}, 16)
	require.Empty(t, r.Lost)
	require.Equal(t, "1", s.state()["reaped:running"])
	require.Equal(t, StateGranted, s.entries()["c"].State)
	n, _ := s.release(t0+3600, "a", "ta", 16)
	require.Equal(t, int64(0), n, "the reaped grant's late release finds nothing")
	require.Equal(t, "2", s.hash(6)["per_customer=c1"])
	r = s.renew(t0+3700, 0, 3000, [][3]string{{"a", "ta", ""}}, 16)
	require.Equal(t, []string{"a"}, r.Lost, "its worker is told to stop it")
}

// TestRollbackFence: a renewal that saw a higher generation than the
// slot holds (a failover lost writes) fences the tenant for a lease: no
// new grants, the renewing worker's grants re-asserted (one over a full
// key handed back), and the other workers' re-asserted as they renew.
func TestRollbackFence(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, map[string]any{"grant_ttl": 5000, "share_ttl": 3000, "rule:per_customer": 1})
	s.prov = 5
	s.request(t0, "a", keyed("a", 3, 1, "per_customer=c1"), 16)
	v, _ := s.claim(t0, "a", keyed("a", 3, 1, "per_customer=c1"), "ta", 3000, 16)
	require.Equal(t, "RUN", v)
	recA, err := s.rdb.HGet(s.ctx, s.keys[3], "a").Result()
	require.NoError(t, err)
	gen := s.entries()["a"].Gen
	// The failover lost everything.
	require.NoError(t, s.rdb.Del(s.ctx, s.keys...).Err())
	// A new activation takes c1 on the new master before the fence.
	s.request(t0+100, "x", keyed("x", 3, 1, "per_customer=c1"), 16)
	s.claim(t0+100, "x", keyed("x", 3, 1, "per_customer=c1"), "tx", 3000, 16)
	r := s.renew(t0+200, gen+5, 3000, [][3]string{{"a", "ta", recA}}, 16)
	require.True(t, r.Fenced)
	require.Empty(t, r.Lost)
	require.Equal(t, []string{"a"}, r.HandBack, "c1 is full: a hands back at its next turn")
	require.Equal(t, StateRunning, s.entries()["a"].State)
	st, _, _, gr := s.request(t0+300, "y", keyed("y", 3, 1), 16)
	require.Equal(t, "PARKED", st, "no grants while fenced")
	require.Empty(t, gr)
	st, _, _, gr = s.request(t0+3300, "z", keyed("z", 3, 1), 16)
	require.Equal(t, "GRANTED", st)
	require.Equal(t, []string{"y", "z"}, gr, "after the fence, grants resume in order")
	require.Equal(t, "1", s.state()["fenced"])
}

// TestHolders: adm_holders counts a key's holders and those of the runs
// named (a child's ancestors): a blocking spawn's child parked on a key
// only its ancestors hold is a deadlock; with another holder it is not.
func TestHolders(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, map[string]any{"grant_ttl": 5000, "share_ttl": 3000, "rule:per_repo": 2})
	s.prov = 10
	holders := func(key string, runs ...any) []int64 {
		res, err := holdersScript.Run(s.ctx, s.rdb, s.keys, append([]any{key}, runs...)...).Int64Slice()
		require.NoError(t, err)
		return res
	}
	s.request(t0, "root", keyed("root", 3, 1, "per_repo=r1"), 16)
	s.claim(t0, "root", keyed("root", 3, 1, "per_repo=r1"), "t1", 3000, 16)
	s.request(t0, "parent", keyed("parent", 3, 0, "per_repo=r1"), 16)
	s.claim(t0, "parent", keyed("parent", 3, 0, "per_repo=r1"), "t2", 3000, 16)
	st, why, _, _ := s.request(t0, "child", keyed("child", 3, 0, "per_repo=r1"), 16)
	require.Equal(t, []string{"PARKED", "concurrency"}, []string{st, why})
	require.Equal(t, []int64{2, 2}, holders("per_repo=r1", "root", "parent"), "only its ancestors hold it")
	require.Equal(t, []int64{2, 1}, holders("per_repo=r1", "parent"), "another holds it too")
	require.Equal(t, []int64{0, 0}, holders("per_repo=r2", "root"))
}
