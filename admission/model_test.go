package admission

import (
	"fmt"
	"sort"
	"strings"
)

// model is a pure Go implementation of one tenant's admission state
// (admission.lua). TestScriptsAgreeWithModel runs random operations on
// both and compares every reply and the whole state after each; the
// model also checks the invariants (I1, I3, I4) as it goes.
type model struct {
	acts    map[string]*mact
	kheld   map[string]int
	leases  map[string]int64
	maxes   map[string]int // rule → max (conf)
	maxrun  int            // 0: unset
	share   int
	ttl     int64
	fence   int64
	gen     int64
	arrival int64
	active  bool
	// counters
	grants, released  int
	reaped            map[string]int
	admitted, running int
}

type mact struct {
	run, queue  string
	p, c        int
	keys        []string
	maxes       []int
	st, why, wk string
	ar, rq, g   int64
	e           int
	holder      string
	reason      string
	seq         int64
	everGranted bool
	ended       bool
}

const span = int64(1) << 44

func newModel(maxes map[string]int, share int, maxrun int, ttl int64) *model {
	return &model{acts: map[string]*mact{}, kheld: map[string]int{}, leases: map[string]int64{}, maxes: maxes,
		share: share, maxrun: maxrun, ttl: ttl, reaped: map[string]int{}}
}

func (r *mact) score() int64 { return int64(r.p*2+r.c)*span + r.ar }

func ruleOf(k string) string { return k[:strings.IndexByte(k, '=')] }

func (m *model) max(r *mact, i int) int {
	if v, ok := m.maxes[ruleOf(r.keys[i])]; ok {
		return v
	}
	if i < len(r.maxes) {
		return r.maxes[i]
	}
	return 1
}

func (m *model) fullkey(r *mact) string {
	for i, k := range r.keys {
		if m.kheld[k] >= m.max(r, i) {
			return k
		}
	}
	return ""
}

func (m *model) limit() int {
	if m.maxrun > 0 && m.maxrun < m.share {
		return m.maxrun
	}
	return m.share
}

// sortedBy returns the acts in state st (and key k, for "key"), in queue
// order: score, then id (Redis's order: the ready zset by score then
// member; the key queue by its member "k|hex(score)|act").
func (m *model) queue(st, k string) []string {
	var out []string
	for a, r := range m.acts {
		if r.st == st && (k == "" || r.wk == k) {
			out = append(out, a)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		si, sj := m.acts[out[i]].score(), m.acts[out[j]].score()
		if si != sj {
			return si < sj
		}
		return out[i] < out[j]
	})
	return out
}

func (m *model) toready(r *mact) { r.st, r.wk = "ready", "" }

func (m *model) tokey(r *mact, k string) { r.st, r.why, r.wk = "key", "concurrency", k }

func (m *model) wakekey(k string, n int) {
	for i, a := range m.queue("key", k) {
		if i >= n {
			return
		}
		m.toready(m.acts[a])
	}
}

func (m *model) kwaiting(k string) int { return len(m.queue("key", k)) }

func (m *model) unhold(a string, r *mact) {
	for _, k := range r.keys {
		m.kheld[k]--
		if m.kheld[k] <= 0 {
			delete(m.kheld, k)
		}
		if m.kwaiting(k) > 0 {
			m.wakekey(k, 1)
		}
	}
	delete(m.leases, a)
	m.admitted--
	if r.st == "running" {
		m.running--
	}
}

func (m *model) hold(r *mact) {
	for _, k := range r.keys {
		m.kheld[k]++
	}
	m.admitted++
}

type call struct {
	now    int64
	grants []string
	ngr    int
}

func (m *model) grant(c *call, a string, r *mact) {
	if c.ngr == 0 {
		m.gen++
	}
	m.hold(r)
	r.st, r.g, r.wk, r.everGranted = "granted", m.gen, "", true
	m.leases[a] = c.now + m.ttl
	m.grants++
	c.ngr++
	c.grants = append(c.grants, a)
}

func (m *model) grantLoop(c *call, most int) {
	if m.fence > c.now {
		return
	}
	examined := 0
	for m.admitted < m.limit() && examined < 64 && c.ngr < most {
		q := m.queue("ready", "")
		if len(q) == 0 {
			return
		}
		examined++
		a := q[0]
		r := m.acts[a]
		if k := m.fullkey(r); k != "" {
			m.tokey(r, k)
		} else {
			m.grant(c, a, r)
		}
	}
}

func (m *model) reap(c *call) {
	type due struct {
		a   string
		exp int64
	}
	var ds []due
	for a, exp := range m.leases {
		if exp <= c.now {
			ds = append(ds, due{a, exp})
		}
	}
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].exp != ds[j].exp {
			return ds[i].exp < ds[j].exp
		}
		return ds[i].a < ds[j].a
	})
	if len(ds) > 64 {
		ds = ds[:64]
	}
	for _, d := range ds {
		r := m.acts[d.a]
		m.reaped[r.st]++
		m.unhold(d.a, r)
		if r.st == "granted" {
			r.g, r.holder, r.ar = 0, "", 0
			m.toready(r)
		} else {
			r.ended = true
			delete(m.acts, d.a)
		}
	}
}

func (m *model) newAct(c *call, a string, req Request) *mact {
	m.arrival++
	r := &mact{run: req.Run, queue: req.Queue, p: req.Priority, c: req.Class, keys: req.Keys, maxes: req.Maxes,
		reason: req.Reason, seq: req.Seq, rq: c.now, why: "capacity", ar: m.arrival}
	m.acts[a] = r
	m.active = true
	if k := m.fullkey(r); k != "" {
		m.tokey(r, k)
	} else {
		m.toready(r)
	}
	return r
}

func (m *model) request(c *call, a string, req Request, most int) *mact {
	m.reap(c)
	if _, ok := m.acts[a]; !ok {
		m.newAct(c, a, req)
	}
	m.grantLoop(c, most)
	return m.acts[a]
}

func (m *model) claim(c *call, a string, req Request, token string, lease int64, most int) string {
	m.reap(c)
	r, ok := m.acts[a]
	if !ok {
		r = m.newAct(c, a, req)
	}
	if r.st == "running" {
		if r.holder == token {
			return "RUN"
		}
		return "BUSY"
	}
	if r.st != "granted" {
		m.grantLoop(c, most)
	}
	if r.st != "granted" {
		r.e++
		return "PARK"
	}
	r.st, r.holder = "running", token
	m.running++
	m.leases[a] = c.now + lease
	return "RUN"
}

func (m *model) release(c *call, a, token string, most int) int {
	m.reap(c)
	n := 0
	if r, ok := m.acts[a]; ok && (token == "" || r.st == "running" && r.holder == token) {
		if r.st == "granted" || r.st == "running" {
			m.unhold(a, r)
			m.released++
		}
		r.ended = true
		delete(m.acts, a)
		n = 1
	}
	m.grantLoop(c, most)
	return n
}

func (m *model) cancel(c *call, a string, most int) int {
	m.reap(c)
	n := 0
	if r, ok := m.acts[a]; ok && r.st != "granted" && r.st != "running" {
		delete(m.acts, a)
		n = 1
	}
	m.grantLoop(c, most)
	return n
}

func (m *model) renew(c *call, seen, lease int64, held [][2]string, most int) (lost []string) {
	m.reap(c)
	if seen > m.gen {
		m.fence = c.now + lease
		m.gen = seen + 1
	}
	for _, h := range held {
		r, ok := m.acts[h[0]]
		if ok && r.st == "running" && r.holder == h[1] {
			m.leases[h[0]] = c.now + lease
			continue
		}
		lost = append(lost, h[0])
	}
	m.grantLoop(c, most)
	return lost
}

func (m *model) pump(c *call, share int, most int) {
	m.share = share
	m.reap(c)
	// wakeall: every key with waiters, its first waiters up to its room
	keys := map[string]bool{}
	for _, r := range m.acts {
		if r.st == "key" {
			keys[r.wk] = true
		}
	}
	for k := range keys {
		q := m.queue("key", k)
		r := m.acts[q[0]]
		room := -1
		for j, rk := range r.keys {
			if rk == k {
				room = m.max(r, j) - m.kheld[k]
			}
		}
		m.wakekey(k, min(room, len(q)))
	}
	m.grantLoop(c, most)
}

// check verifies the model's invariants.
func (m *model) check() error {
	held := map[string]int{}
	admitted, running := 0, 0
	for a, r := range m.acts {
		switch r.st {
		case "granted", "running":
			admitted++
			for _, k := range r.keys {
				held[k]++
			}
			if _, ok := m.leases[a]; !ok {
				return fmt.Errorf("%s is %s without a lease", a, r.st)
			}
			if r.st == "running" {
				running++
			}
		case "ready", "key":
			if _, ok := m.leases[a]; ok {
				return fmt.Errorf("%s is %s with a lease", a, r.st)
			}
		default:
			return fmt.Errorf("%s is in no state (%q)", a, r.st)
		}
	}
	for k, n := range held {
		if m.kheld[k] != n {
			return fmt.Errorf("key %s: held %d, counted %d", k, n, m.kheld[k])
		}
	}
	if admitted != m.admitted || running != m.running {
		return fmt.Errorf("admitted %d running %d, counted %d %d", admitted, running, m.admitted, m.running)
	}
	return nil
}
