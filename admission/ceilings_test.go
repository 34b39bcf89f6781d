package admission

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/reply"
)

func ceilingConf(extra map[string]any) map[string]any {
	m := map[string]any{"grant_ttl": 5000, "share_ttl": 3000}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// root is the request of a root chain's first activation; step one of
// an activation of a tree already started (class 0) of chain.
func root(run string) Request {
	return Request{Run: run, Root: run, Queue: "default", Priority: 3, Class: 1, Reason: "start"}
}

func step(run, chain string) Request {
	return Request{Run: run, Root: chain, Queue: "default", Priority: 3, Class: 0, Reason: "wake"}
}

// requestAt is a request's whole reply: its state, reason, retry at and
// grants.
func (s *slot) requestAt(now int64, a string, r Request) (state, why string, retry int64, grants []string) {
	res := s.run(requestScript, now, a, reqJSON(s.t, r), 16)
	return reply.String(res[0]), reply.String(res[1]), reply.Int(res[5]), grantsOf(res, 6)
}

// end releases a with what it spent (nano, -1: unknown) and the chain
// that ended with it.
func (s *slot) end(now int64, a, token string, spent int64, chain string) []string {
	used := ""
	if spent >= 0 {
		used = strconv.FormatInt(spent, 10)
	}
	res := s.run(releaseScript, now, a, token, 16, used, chain)
	return grantsOf(res, 3)
}

func (s *slot) overrides(now int64, over string) []string {
	res := s.run(pumpScript, now, "", over, "0", 64)
	return grantsOf(res, 2)
}

// claimed claims a and returns its verdict and allowance (nano).
func (s *slot) claimed(now int64, a string, r Request, token string) (string, int64) {
	v, _ := s.claim(now, a, r, token, 3000, 16)
	return v, s.entries()[a].Allowance
}

// TestMaxRunning: a tenant never has more activations admitted than its
// max_running, whatever its share; the others wait (tenant_concurrency)
// and each end admits the next.
func TestMaxRunning(t *testing.T) {
	t.Parallel()
	s := newSlot(t, true, ceilingConf(map[string]any{"max_running": 2}))
	s.prov = 10
	for i := range 5 {
		st, why, _, _ := s.request(t0, fmt.Sprint("a", i), root(fmt.Sprint("a", i)), 16)
		if i < 2 {
			require.Equal(t, "GRANTED", st)
			continue
		}
		require.Equal(t, []string{"PARKED", WaitTenantConcurrency}, []string{st, why}, "a%d", i)
	}
	require.Equal(t, "2", s.state()["admitted"])
	w, ok := whereOf(t, s, "a3")
	require.True(t, ok)
	require.Equal(t, 2, w.Position)
	for i := range 3 {
		v, _ := s.claim(t0+1, fmt.Sprint("a", i), root(fmt.Sprint("a", i)), "tok", 3000, 16)
		if i == 2 {
			require.Equal(t, "PARK", v, "no room at the claim either")
			continue
		}
		require.Equal(t, "RUN", v)
	}
	_, gr := s.release(t0+2, "a0", "tok", 16)
	require.Equal(t, []string{"a2"}, gr, "an end admits the next in line")
	require.Equal(t, "2", s.state()["admitted"])
	// Raised, it admits at once: the pump of `tenant set`.
	require.Equal(t, []string{"a3", "a4"}, s.overrides(t0+3, `{"max_running":"5"}`))
	require.Equal(t, "4", s.state()["admitted"])
}

// TestRunsInFlight: root chains count from their first grant to their
// end, never their children or later activations; a root over the
// ceiling waits (tenant_runs) and the end of a chain admits it.
func TestRunsInFlight(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, ceilingConf(map[string]any{"runs_in_flight": 2}))
	s.prov = 10
	for _, r := range []string{"r1", "r2"} {
		st, _, _, _ := s.requestAt(t0, r, root(r))
		require.Equal(t, "GRANTED", st)
	}
	st, why, retry, _ := s.requestAt(t0, "r3", root("r3"))
	require.Equal(t, []string{"PARKED", WaitTenantRuns}, []string{st, why})
	require.Zero(t, retry, "when a chain ends is not known")
	require.Equal(t, "1", s.state()["n:blocked:tenant_runs:default"])
	// Children and the chains' next activations are not roots: admitted.
	st, _, _, _ = s.requestAt(t0, "kid", Request{Run: "kid", Root: "r1", Queue: "default", Priority: 3, Class: 0, Reason: "start"})
	require.Equal(t, "GRANTED", st)
	st, _, _, _ = s.requestAt(t0, "r2@wake-1", step("r2", "r2"))
	require.Equal(t, "GRANTED", st)
	// A grant that lapsed and is granted again is still one chain.
	st, _, _, gr := s.requestAt(t0+6000, "r4", root("r4"))
	require.Equal(t, "PARKED", st)
	require.ElementsMatch(t, []string{"r1", "r2", "kid", "r2@wake-1"}, gr, "the lapsed grants, again")
	require.Equal(t, int64(2), s.rdb.SCard(s.ctx, s.keys[10]).Val())
	// r1's activation ends without its chain ending: nothing moves.
	require.Empty(t, s.end(t0+6001, "r1", "", -1, ""))
	require.Equal(t, StateBlocked, s.entries()["r3"].State)
	// r1's chain ends: r3 is admitted in the same call, r4 still waits.
	require.Equal(t, []string{"r3"}, s.end(t0+6002, "kid", "", -1, "r1"))
	require.Equal(t, StateBlocked, s.entries()["r4"].State)
	require.Equal(t, WaitTenantRuns, s.entries()["r4"].Why)
	// Raising the ceiling admits r4 in the override's pump.
	require.Equal(t, []string{"r4"}, s.overrides(t0+6003, `{"runs_in_flight":"3"}`))
	require.Equal(t, int64(3), s.rdb.SCard(s.ctx, s.keys[10]).Val())
}

// TestStartsPerMinute: GCRA over root chain starts, a burst of the rate
// then one every 60/N s; a root over it waits (tenant_rate) with the time
// the next start is allowed, when a pump admits it and not before.
func TestStartsPerMinute(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, map[string]any{"grant_ttl": 600000, "share_ttl": 3000, "starts_per_minute": 2})
	s.prov = 10
	for _, r := range []string{"r1", "r2"} {
		st, _, _, _ := s.requestAt(t0, r, root(r))
		require.Equal(t, "GRANTED", st, "the burst")
	}
	st, why, retry, _ := s.requestAt(t0+1000, "r3", root("r3"))
	require.Equal(t, []string{"PARKED", WaitTenantRate}, []string{st, why})
	require.Equal(t, t0+30000, retry, "the next start is one period (30 s) after the burst")
	st, _, _, _ = s.requestAt(t0+1000, "r1@wake-1", step("r1", "r1"))
	require.Equal(t, "GRANTED", st, "a started chain's next activation is no start")
	require.Empty(t, s.pump(t0+29999, 10, 64), "not before its time")
	require.Equal(t, []string{"r3"}, s.pump(t0+30000, 10, 64))
	st, _, retry, _ = s.requestAt(t0+30000, "r4", root("r4"))
	require.Equal(t, "PARKED", st)
	require.Equal(t, t0+60000, retry)
	require.Empty(t, s.end(t0+59000, "r4", "", -1, ""), "releasing the parked request leaves the rate as it is")
	_, _, _, _ = s.requestAt(t0+59000, "r5", root("r5"))
	require.Equal(t, StateBlocked, s.entries()["r5"].State)
	require.Equal(t, []string{"r5"}, s.pump(t0+60000, 10, 64))
}

// TestRefuseRegistersNothing: under on_exhausted: refuse a root chain's
// first activation that meets a ceiling is refused, with the ceiling and
// (for the rate) when it has room again, and leaves no record; other
// activations are not refused.
func TestRefuseRegistersNothing(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, ceilingConf(map[string]any{"runs_in_flight": 1, "starts_per_minute": 1, "on_exhausted": "refuse"}))
	s.prov = 10
	st, _, _, _ := s.requestAt(t0, "r1", root("r1"))
	require.Equal(t, "GRANTED", st)
	st, why, retry, _ := s.requestAt(t0, "r2", root("r2"))
	require.Equal(t, []string{"REFUSED", WaitTenantRuns}, []string{st, why})
	require.Zero(t, retry)
	require.NotContains(t, s.entries(), "r2")
	st, _, _, _ = s.requestAt(t0, "r1@wake-1", step("r1", "r1"))
	require.Equal(t, "GRANTED", st)
	s.end(t0+1, "r1", "", -1, "r1")
	st, why, retry, _ = s.requestAt(t0+2, "r3", root("r3"))
	require.Equal(t, []string{"REFUSED", WaitTenantRate}, []string{st, why}, "one a minute: r1 took it")
	require.Equal(t, t0+60000, retry)
}

const usd = int64(1e9)

// spendOfSlot is the day window's spent, held and overrun (nano) at now.
func (s *slot) window(now int64) (spent, held, overrun int64) {
	day, _ := Windows(time.UnixMilli(now))
	m := s.hash(11)
	n := func(f string) int64 {
		v, _ := strconv.ParseInt(m["d:"+day+":"+f], 10, 64)
		return v
	}
	return n("spent"), n("held"), n("overrun")
}

// TestSpendAllowances: a claim lends min(spend_grant, room) of the day's
// window; a grant needs room; an end settles what was used (the excess
// over the allowance is overrun); spent + held never passes the limit;
// an activation that meets a full window waits (tenant_budget) until an
// end frees room, or the next window.
func TestSpendAllowances(t *testing.T) {
	t.Parallel()
	s := newSlot(t, true, ceilingConf(map[string]any{"spend_per_day": "0.25", "spend_grant": "0.10"}))
	s.prov = 10
	limit := usd / 4
	holds := func(now int64) {
		spent, held, _ := s.window(now)
		require.LessOrEqual(t, spent+held, limit, "spent + held ≤ limit")
	}
	for i, want := range []int64{usd / 10, usd / 10, usd / 20} {
		a := fmt.Sprint("a", i)
		st, _, _, _ := s.requestAt(t0, a, root(a))
		require.Equal(t, "GRANTED", st)
		v, al := s.claimed(t0, a, root(a), "tok"+a)
		require.Equal(t, "RUN", v)
		require.Equal(t, want, al, "%s: min(spend_grant, room)", a)
		holds(t0)
	}
	st, why, retry, _ := s.requestAt(t0, "a3", root("a3"))
	require.Equal(t, []string{"PARKED", WaitTenantBudget}, []string{st, why})
	day := t0 - t0%86400000
	require.Equal(t, day+86400000, retry, "room next exists at the next UTC midnight")
	// A top-up with no room lends nothing; the allowance stays.
	res := s.run(topupScript, t0, "a0", "toka0", usd/10, "a0:2")
	require.Equal(t, []any{usd / 10, int64(0)}, res)
	// a0 used 0.03 of its 0.10: 0.07 comes back, and a3 is admitted.
	require.Equal(t, []string{"a3"}, s.end(t0+1, "a0", "toka0", 3*usd/100, ""))
	spent, held, _ := s.window(t0)
	require.Equal(t, []int64{3 * usd / 100, 15 * usd / 100}, []int64{spent, held})
	v, al := s.claimed(t0+2, "a3", root("a3"), "toka3")
	require.Equal(t, "RUN", v)
	require.Equal(t, 7*usd/100, al)
	holds(t0)
	// a1 used 0.12 of its 0.10: 0.10 spent, 0.02 overrun.
	s.end(t0+3, "a1", "toka1", 12*usd/100, "")
	spent, held, overrun := s.window(t0)
	require.Equal(t, []int64{13 * usd / 100, 12 * usd / 100, 2 * usd / 100}, []int64{spent, held, overrun})
	// A top-up moves what room there is, once per id.
	s.end(t0+4, "a2", "toka2", 0, "")
	res = s.run(topupScript, t0+5, "a3", "toka3", usd/100, "a3:2")
	require.Equal(t, []any{12 * usd / 100, 5 * usd / 100}, res, "spend_grant asked, the room (0.05) lent")
	res = s.run(topupScript, t0+6, "a3", "toka3", usd/100, "a3:2")
	require.Equal(t, []any{12 * usd / 100, int64(0)}, res, "the same id: the first outcome")
	res = s.run(topupScript, t0+6, "a3", "someone", usd/100, "a3:3")
	require.Equal(t, []any{int64(-2), int64(0)}, res, "not its holder")
	holds(t0)
	// a3's worker dies: its reaped allowance stays held, lapsed, until
	// what it used is known; the run's next activation's release settles
	// it with that, once.
	s.renew(t0+3500, 0, 3000, nil, 16)
	spent, held, _ = s.window(t0)
	require.Equal(t, []int64{13 * usd / 100, 12 * usd / 100}, []int64{spent, held}, "a3's 0.12 lapsed, still held")
	require.Contains(t, s.hash(12), "a3")
	s.requestAt(t0+3501, "a4", root("a4"))
	_, al = s.claimed(t0+3501, "a4", root("a4"), "toka4")
	require.Zero(t, al, "no room while a3's allowance is held")
	s.requestAt(t0+3502, "a3@recover-1", root("a3"))
	s.run(releaseScript, t0+3503, "a3@recover-1", "", 16, "", "", "a3", 4*usd/100)
	spent, held, overrun = s.window(t0)
	require.Equal(t, []int64{17 * usd / 100, 0, 2 * usd / 100}, []int64{spent, held, overrun}, "a3 used 0.04 of its 0.12")
	require.NotContains(t, s.hash(12), "a3")
	s.run(releaseScript, t0+3504, "a3@recover-2", "", 16, "", "", "a3", 9*usd/100)
	spent, _, _ = s.window(t0)
	require.Equal(t, 17*usd/100, spent, "settled once")
	holds(t0)
}

// TestGrantsWithinLendableRoom: a binding window grants no more
// activations than its room can lend spend_grant to, counting the grants
// not yet claimed, so none of them parks again at its claim; an end that
// frees room grants the next.
func TestGrantsWithinLendableRoom(t *testing.T) {
	t.Parallel()
	s := newSlot(t, true, ceilingConf(map[string]any{"spend_per_day": "0.25", "spend_grant": "0.10"}))
	s.prov = 10
	var granted []string
	for i := range 5 {
		a := fmt.Sprint("a", i)
		st, why, _, _ := s.requestAt(t0, a, root(a))
		if st == "GRANTED" {
			granted = append(granted, a)
		} else {
			require.Equal(t, []string{"PARKED", WaitTenantBudget}, []string{st, why}, a)
		}
	}
	require.Equal(t, []string{"a0", "a1", "a2"}, granted, "0.25 lends 0.10, 0.10 and 0.05: three grants, not five")
	for _, a := range granted {
		v, al := s.claimed(t0+1, a, root(a), "tok"+a)
		require.Equal(t, "RUN", v, "%s found room at its claim", a)
		require.Positive(t, al, a)
	}
	require.Equal(t, []string{"a3"}, s.end(t0+2, "a0", "toka0", usd/100, ""), "a0's end frees 0.09: the next is granted")
}

// TestLapsedSettle: housekeeping's settle of a lapsed allowance (what
// its run's record tells, or all of it) is done once, and frees the room
// for a waiter; a lapse without a spend limit counts what it spent.
func TestLapsedSettle(t *testing.T) {
	t.Parallel()
	s := newSlot(t, true, ceilingConf(map[string]any{"spend_per_day": "0.20", "spend_grant": "0.10"}))
	s.prov = 10
	for _, a := range []string{"a0", "a1"} {
		s.requestAt(t0, a, root(a))
		_, al := s.claimed(t0, a, root(a), "t"+a)
		require.Equal(t, usd/10, al)
	}
	s.renew(t0+3500, 0, 3000, nil, 16) // both reaped
	st, why, _, _ := s.requestAt(t0+3501, "a2", root("a2"))
	require.Equal(t, []string{"PARKED", WaitTenantBudget}, []string{st, why})
	res := s.run(settleScript, t0+3502, "a0", strconv.FormatInt(usd/100, 10), 16)
	require.Equal(t, int64(1), reply.Int(res[0]))
	require.Equal(t, []string{"a2"}, grantsOf(res, 3), "the room a0 left admits the waiter")
	res = s.run(settleScript, t0+3503, "a0", "", 16)
	require.Equal(t, int64(0), reply.Int(res[0]), "once")
	res = s.run(settleScript, t0+3504, "a1", "", 16)
	require.Equal(t, int64(1), reply.Int(res[0]))
	spent, held, _ := s.window(t0)
	require.Equal(t, []int64{11 * usd / 100, 0}, []int64{spent, held}, "a0's 0.01, a1's unknown use as all of its 0.10")
	require.Empty(t, s.hash(12))

	// The same id claimed again after its lapse (asynq ran its task
	// again) and lapsing again keeps both lapses, the older as <id>#<ms>.
	s = newSlot(t, true, ceilingConf(map[string]any{"spend_per_day": "1", "spend_grant": "0.10"}))
	s.prov = 10
	now := t0 + 10000
	s.requestAt(now, "a5", root("a5"))
	s.claimed(now, "a5", root("a5"), "x1")
	s.renew(now+3500, 0, 3000, nil, 16)
	s.requestAt(now+3501, "a5", root("a5"))
	s.claimed(now+3501, "a5", root("a5"), "x2")
	s.renew(now+7100, 0, 3000, nil, 16)
	l := s.hash(12)
	require.Contains(t, l, "a5")
	require.Contains(t, l, fmt.Sprintf("a5#%d", now+7100))
	_, held, _ = s.window(now)
	require.Equal(t, 2*usd/10, held, "both still held")

	// A release by a token that does not hold the record (the first
	// holder's, late, after its grant was reaped and granted again) ends
	// nothing.
	s.requestAt(now+7200, "a6", root("a6"))
	s.claimed(now+7200, "a6", root("a6"), "y1")
	s.renew(now+10300, 0, 3000, nil, 16)
	st, _, _, _ = s.requestAt(now+10301, "a6", root("a6"))
	require.Equal(t, "GRANTED", st)
	n, _ := s.release(now+10302, "a6", "y1", 16)
	require.Zero(t, n, "not its holder's any more")
	require.Equal(t, StateGranted, s.entries()["a6"].State)
}

// TestSpendCountedWithoutLimit: a tenant without a spend limit holds no
// allowance, but what its activations spent is counted in the day's and
// the month's windows (tenant show; a limit set later in the window
// counts it); a reaped activation's spend counts once it is settled.
func TestSpendCountedWithoutLimit(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, ceilingConf(nil))
	s.prov = 10
	for _, a := range []string{"a0", "a1"} {
		s.requestAt(t0, a, root(a))
		v, al := s.claimed(t0, a, root(a), "t"+a)
		require.Equal(t, "RUN", v)
		require.Zero(t, al, "no limit: no allowance")
	}
	s.end(t0+1, "a0", "ta0", 3*usd/100, "")
	spent, held, overrun := s.window(t0)
	require.Equal(t, []int64{3 * usd / 100, 0, 0}, []int64{spent, held, overrun})
	s.renew(t0+3500, 0, 3000, nil, 16) // a1 reaped
	spent, _, _ = s.window(t0)
	require.Equal(t, 3*usd/100, spent, "what a1 spent is not known yet")
	s.run(settleScript, t0+3501, "a1", strconv.FormatInt(2*usd/100, 10), 16)
	spent, _, _ = s.window(t0)
	require.Equal(t, 5*usd/100, spent, "its settle counts it")
	day, month := Windows(time.UnixMilli(t0))
	m := s.hash(11)
	require.Equal(t, strconv.FormatInt(5*usd/100, 10), m["d:"+day+":spent"])
	require.Equal(t, strconv.FormatInt(5*usd/100, 10), m["m:"+month+":spent"])
}

// TestSpendWindowRollsOver: a waiter on a full day's window is admitted
// by the first pump of the next UTC day, and its allowance is held in
// the new window; the month's window still counts both.
func TestSpendWindowRollsOver(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, ceilingConf(map[string]any{"spend_per_day": "0.10", "spend_per_month": "1", "spend_grant": "0.10"}))
	s.prov = 10
	now := time.Date(2026, 12, 31, 23, 59, 0, 0, time.UTC).UnixMilli()
	s.requestAt(now, "a0", root("a0"))
	s.claimed(now, "a0", root("a0"), "t0")
	s.end(now+1, "a0", "t0", usd/10, "")
	st, why, retry, _ := s.requestAt(now+2, "a1", root("a1"))
	require.Equal(t, []string{"PARKED", WaitTenantBudget}, []string{st, why})
	midnight := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()
	require.Equal(t, midnight, retry)
	require.Empty(t, s.pump(midnight-1, 10, 64))
	require.Equal(t, []string{"a1"}, s.pump(midnight, 10, 64))
	_, al := s.claimed(midnight+1, "a1", root("a1"), "t1")
	require.Equal(t, usd/10, al)
	m := s.hash(11)
	require.Equal(t, strconv.FormatInt(usd/10, 10), m["d:2026-12-31:spent"])
	require.Equal(t, strconv.FormatInt(usd/10, 10), m["m:2026-12:spent"])
	require.Equal(t, strconv.FormatInt(usd/10, 10), m["d:2027-01-01:held"])
	require.Equal(t, strconv.FormatInt(usd/10, 10), m["m:2027-01:held"])
}

// TestWindowsAgree: the scripts name the windows of a time as Windows
// does, across days, months, leap days and years.
func TestWindowsAgree(t *testing.T) {
	t.Parallel()
	s := newSlot(t, false, ceilingConf(map[string]any{"spend_per_month": "1000", "spend_grant": "0.000001"}))
	s.prov = 1000
	at := []time.Time{time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2024, 2, 29, 23, 59, 59, 999e6, time.UTC),
		time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2100, 2, 28, 12, 0, 0, 0, time.UTC), time.Date(2000, 12, 31, 0, 0, 0, 0, time.UTC)}
	for d := 0; d < 800; d += 37 {
		at = append(at, time.Date(2026, 1, 1, 7, 0, 0, 0, time.UTC).AddDate(0, 0, d))
	}
	for i, tm := range at {
		a := fmt.Sprint("w", i)
		now := tm.UnixMilli()
		s.requestAt(now, a, root(a))
		s.claimed(now, a, root(a), "t")
		day, month := Windows(tm)
		require.Equal(t, []string{"d:" + day, "m:" + month}, s.entries()[a].Windows, "%s", tm)
		s.end(now, a, "t", 0, "")
	}
}

// TestOverridesReadOnlyWhileSet: calls skip reading the overrides while
// the tenant has none (the state's ov flag, kept by the pump of `tenant
// set`), and still honour every override: one set through the pump, one
// kept from before the flag existed (written directly, no flag: the
// next call looks, honours it and sets the flag), and none after a
// clearing pump. A new policy version reaches the tenant in the same
// read (sync).
func TestOverridesReadOnlyWhileSet(t *testing.T) {
	t.Parallel()
	s := newSlot(t, true, ceilingConf(map[string]any{"max_running": 1}))
	s.prov = 10
	over := s.keys[1]
	st, _, _, _ := s.request(t0, "a0", root("a0"), 16)
	require.Equal(t, "GRANTED", st)
	require.Equal(t, "0", s.state()["ov"], "the first call looked and found no overrides")
	st, why, _, _ := s.request(t0, "a1", root("a1"), 16)
	require.Equal(t, []string{"PARKED", WaitTenantConcurrency}, []string{st, why})

	// Through the pump: raised, it admits a1, and the flag says look.
	require.Equal(t, []string{"a1"}, s.overrides(t0+1, `{"max_running":"3"}`))
	require.Equal(t, "1", s.state()["ov"])
	st, _, _, _ = s.request(t0+2, "a2", root("a2"), 16)
	require.Equal(t, "GRANTED", st, "the override is read by every call while set")

	// Cleared by the pump: max_running 1 again, the flag says none.
	s.run(pumpScript, t0+3, "", "", "1", 64)
	require.Equal(t, "0", s.state()["ov"])
	st, why, _, _ = s.request(t0+3, "a3", root("a3"), 16)
	require.Equal(t, []string{"PARKED", WaitTenantConcurrency}, []string{st, why})

	// An override kept from before the flag: no flag, so the next call
	// looks, honours it and notes that there are some.
	require.NoError(t, s.rdb.HDel(s.ctx, s.keys[2], "ov").Err())
	require.NoError(t, s.rdb.HSet(s.ctx, over, "max_running", "9").Err())
	st, _, _, gr := s.request(t0+4, "a4", root("a4"), 16)
	require.Equal(t, "GRANTED", st)
	require.Equal(t, []string{"a3", "a4"}, gr, "max_running 9 from the kept override: a3 first, then a4")
	require.Equal(t, "1", s.state()["ov"])

	// A newer policy reaches the tenant in the same read as its settings.
	s.pv, s.conf = 2, `{"max_running": 1, "grant_ttl": 5000, "share_ttl": 3000, "spend_grant": "0.5"}`
	s.request(t0+6, "a5", root("a5"), 16)
	require.Equal(t, "2", s.hash(0)["pv"])
	require.Equal(t, "0.5", s.hash(0)["spend_grant"])
}
