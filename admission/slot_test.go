package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
)

func TestMain(m *testing.M) { testenv.MainLeakFree(m) }

// slot runs the tenant scripts of one tenant directly, with the caller's
// arguments spelled out (no policy watcher, no enqueue).
type slot struct {
	t    testing.TB
	ctx  context.Context
	rdb  *redisfn.Client
	ks   keyspace.Space
	keys []string
	conf string
	pv   int64
	prov int
}

func newSlot(t testing.TB, sharded bool, conf map[string]any) *slot {
	t.Helper()
	r := testenv.NewRedis(t)
	ks := keyspace.New(r.Namespace)
	if sharded {
		ks = keyspace.NewSharded(r.Namespace, 4)
	}
	b, err := json.Marshal(conf)
	require.NoError(t, err)
	s := &slot{t: t, ctx: context.Background(), rdb: redisfn.NewClient(r.Client), ks: ks, keys: ks.AdmTenantKeys("acme"),
		conf: string(b), pv: 1, prov: 1}
	t.Cleanup(func() { s.rdb.Del(context.Background(), s.keys...) })
	return s
}

func (s *slot) head(now int64) []any { return []any{now, s.pv, s.conf, s.prov} }

func (s *slot) run(sc *redisfn.Script, now int64, args ...any) []any {
	s.t.Helper()
	res, err := sc.Run(s.ctx, s.rdb, s.keys, append(s.head(now), args...)...).Slice()
	require.NoError(s.t, err)
	return res
}

func reqJSON(t testing.TB, r Request) string {
	b, err := json.Marshal(r)
	require.NoError(t, err)
	return string(b)
}

// grantsOf are the activation ids of the grants at the end of res, from
// index i.
func grantsOf(res []any, i int) []string {
	var out []string
	for ; i+1 < len(res); i += 2 {
		out = append(out, reply.String(res[i]))
	}
	return out
}

func (s *slot) request(now int64, a string, r Request, most int) (state, why, key string, grants []string) {
	res := s.run(requestScript, now, a, reqJSON(s.t, r), most)
	return reply.String(res[0]), reply.String(res[1]), reply.String(res[2]), grantsOf(res, 6)
}

func (s *slot) claim(now int64, a string, r Request, token string, lease int64, most int) (string, []string) {
	res := s.run(claimScript, now, a, reqJSON(s.t, r), token, lease, most)
	return reply.String(res[0]), grantsOf(res, 6)
}

func (s *slot) release(now int64, a, token string, most int) (int64, []string) {
	res := s.run(releaseScript, now, a, token, most, "", "")
	return reply.Int(res[0]), grantsOf(res, 3)
}

func (s *slot) cancel(now int64, a string, most int) (int64, []string) {
	res := s.run(cancelScript, now, a, most, "")
	return reply.Int(res[0]), grantsOf(res, 3)
}

func (s *slot) pump(now int64, share int, most int) []string {
	res := s.run(pumpScript, now, strconv.Itoa(share), "", "0", most)
	return grantsOf(res, 2)
}

func (s *slot) renew(now, seen, lease int64, held [][3]string, most int) Renewed {
	args := []any{seen, lease, most}
	for _, h := range held {
		args = append(args, h[0], h[1], h[2])
	}
	res := s.run(renewScript, now, args...)
	r, _, err := parseRenewed(res)
	require.NoError(s.t, err)
	return r
}

// entries reads every activation record.
func (s *slot) entries() map[string]Entry {
	m, err := s.rdb.HGetAll(s.ctx, s.keys[3]).Result()
	require.NoError(s.t, err)
	out := map[string]Entry{}
	for a, raw := range m {
		var e Entry
		require.NoError(s.t, json.Unmarshal([]byte(raw), &e), raw)
		out[a] = e
	}
	return out
}

func (s *slot) hash(i int) map[string]string {
	m, err := s.rdb.HGetAll(s.ctx, s.keys[i]).Result()
	require.NoError(s.t, err)
	return m
}

func (s *slot) state() map[string]string { return s.hash(2) }

// TestScriptsAgreeWithModel runs random sequences of requests, claims,
// releases, renewals, cancels, pumps and time passing on the scripts and
// on the Go model, and requires the same reply of every call and the same
// state after each (records, key slots, counts, leases), on both layouts;
// the model checks I1 (no key above its max), I3 (grants = releases +
// reaps, every grant ended once) and I4 (every request in exactly one
// place) throughout.
func TestScriptsAgreeWithModel(t *testing.T) {
	t.Parallel()
	for seed := range uint64(8) {
		t.Run(fmt.Sprint("seed-", seed), func(t *testing.T) {
			t.Parallel()
			agree(t, seed, seed%2 == 1, 400)
		})
	}
}

var debugSeed uint64 = 1

func agree(t *testing.T, seed uint64, sharded bool, steps int) {
	rng := rand.New(rand.NewPCG(seed, 7))
	maxes := map[string]int{"per_customer": 2, "per_repo": 1}
	ttl := int64(5000)
	s := newSlot(t, sharded, map[string]any{"grant_ttl": ttl, "share_ttl": 3000, "rule:per_customer": 2, "rule:per_repo": 1})
	share := 1 + rng.IntN(6)
	s.prov = share
	m := newModel(maxes, share, 0, ttl)
	now := int64(1_800_000_000_000)
	lease := int64(3000)
	tokens := map[string]string{}
	var acts []string
	newReq := func(a string) Request {
		r := Request{Run: a, Queue: []string{"default", "critical"}[rng.IntN(2)], Priority: 1 + rng.IntN(5), Class: rng.IntN(2),
			Reason: "start"}
		if rng.IntN(3) > 0 {
			r.Keys = append(r.Keys, fmt.Sprintf("per_customer=c%d", rng.IntN(3)))
			r.Maxes = append(r.Maxes, 2)
		}
		if rng.IntN(4) == 0 {
			r.Keys = append(r.Keys, fmt.Sprintf("per_repo=r%d", rng.IntN(2)))
			r.Maxes = append(r.Maxes, 1)
		}
		return r
	}
	pick := func() string {
		if len(acts) == 0 || rng.IntN(5) == 0 {
			a := fmt.Sprintf("run%03d", len(acts))
			acts = append(acts, a)
			return a
		}
		return acts[rng.IntN(len(acts))]
	}
	for step := range steps {
		c := &call{now: now}
		most := 1 + rng.IntN(16)
		switch op := rng.IntN(10); {
		case op < 3:
			a := pick()
			r := newReq(a)
			st, _, _, gr := s.request(now, a, r, most)
			mr := m.request(c, a, r, most)
			require.Equal(t, c.grants, gr, "step %d request %s grants", step, a)
			require.Equal(t, mstatus(mr), st, "step %d request %s", step, a)
		case op < 5:
			a := pick()
			tok := fmt.Sprintf("tok%d", step)
			r := newReq(a)
			v, gr := s.claim(now, a, r, tok, lease, most)
			mv := m.claim(c, a, r, tok, lease, most)
			require.Equal(t, mv, v, "step %d claim %s", step, a)
			require.Equal(t, c.grants, gr, "step %d claim %s grants", step, a)
			if v == "RUN" {
				tokens[a] = tok
			}
		case op < 7:
			a := pick()
			tok := tokens[a]
			if rng.IntN(6) == 0 {
				tok = "someone-else"
			}
			n, gr := s.release(now, a, tok, most)
			mn := m.release(c, a, tok, most)
			require.Equal(t, int64(mn), n, "step %d release %s", step, a)
			require.Equal(t, c.grants, gr, "step %d release %s grants", step, a)
		case op == 7:
			var held [][3]string
			var mheld [][2]string
			for _, a := range acts {
				if tok, ok := tokens[a]; ok && rng.IntN(2) == 0 {
					held = append(held, [3]string{a, tok, ""})
					mheld = append(mheld, [2]string{a, tok})
				}
			}
			got := s.renew(now, 0, lease, held, most)
			lost := m.renew(c, 0, lease, mheld, most)
			require.Equal(t, lost, got.Lost, "step %d renew", step)
		case op == 8:
			if rng.IntN(2) == 0 {
				a := pick()
				n, gr := s.cancel(now, a, most)
				require.Equal(t, int64(m.cancel(c, a, most)), n, "step %d cancel %s", step, a)
				require.Equal(t, c.grants, gr, "step %d cancel grants", step)
			} else {
				share = 1 + rng.IntN(6)
				s.prov = share // a share gone stale falls back to the same
				gr := s.pump(now, share, 64)
				m.pump(c, share, 64)
				sort.Strings(gr) // wakeall visits keys in hash order
				sort.Strings(c.grants)
				require.Equal(t, c.grants, gr, "step %d pump", step)
			}
		default:
			now += int64(rng.IntN(3000))
		}
		if testing.Verbose() && seed == debugSeed {
			t.Logf("step %d now %d: %+v", step, now, c)
			for a, r := range m.acts {
				t.Logf("   %s %+v", a, *r)
			}
		}
		require.NoError(t, m.check(), "step %d", step)
		sameState(t, step, s, m, maxes)
	}
}

func mstatus(r *mact) string {
	switch r.st {
	case "ready", "key":
		return "PARKED"
	}
	return map[string]string{"granted": "GRANTED", "running": "RUNNING"}[r.st]
}

// sameState compares the Redis slot with the model.
func sameState(t *testing.T, step int, s *slot, m *model, maxes map[string]int) {
	t.Helper()
	es := s.entries()
	require.Len(t, es, len(m.acts), "step %d: records", step)
	for a, r := range m.acts {
		e, ok := es[a]
		require.True(t, ok, "step %d: %s has no record", step, a)
		require.Equal(t, r.st, e.State, "step %d: %s state", step, a)
		require.Equal(t, r.wk, e.WaitKey, "step %d: %s key", step, a)
		require.Equal(t, r.holder, e.Holder, "step %d: %s holder", step, a)
		require.Equal(t, r.e, e.Epoch, "step %d: %s epoch", step, a)
	}
	held := s.hash(6)
	require.Len(t, held, len(m.kheld), "step %d: kheld %v vs %v", step, held, m.kheld)
	for k, n := range m.kheld {
		require.Equal(t, strconv.Itoa(n), held[k], "step %d: kheld %s", step, k)
		require.LessOrEqual(t, n, maxes[ruleOf(k)], "step %d: I1: key %s above its max", step, k)
	}
	st := s.state()
	require.Equal(t, strconv.Itoa(m.admitted), orZero(st["admitted"]), "step %d admitted", step)
	require.Equal(t, strconv.Itoa(m.running), orZero(st["running"]), "step %d running", step)
	// I3: every grant ended by exactly one of a release and a reap, or
	// still held.
	grants, _ := strconv.Atoi(orZero(st["grants"]))
	released, _ := strconv.Atoi(orZero(st["released"]))
	reaped := 0
	for _, k := range []string{"reaped:granted", "reaped:running"} {
		n, _ := strconv.Atoi(orZero(st[k]))
		reaped += n
	}
	require.Equal(t, m.grants, grants, "step %d grants", step)
	require.Equal(t, grants, released+reaped+m.admitted, "step %d: I3 grants = releases + reaps + held", step)
	// The per-queue counts add up to what the records say.
	counts := map[string]int{}
	for _, r := range m.acts {
		w := "n:" + r.st + ":" + r.queue
		if r.st == "key" {
			w = "n:blocked:concurrency:" + r.queue
		}
		counts[w]++
	}
	for f, v := range st {
		if len(f) > 2 && f[:2] == "n:" {
			n, _ := strconv.Atoi(v)
			require.Equal(t, counts[f], n, "step %d: count %s", step, f)
		}
	}
}

func orZero(s string) string {
	if s == "" {
		return "0"
	}
	return s
}
