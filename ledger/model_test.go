package ledger

import (
	"errors"
	"fmt"
	"sort"
)

// model is a pure Go implementation of the ledger's rules (package doc), on
// nano-USD. The fuzz test exercises it and TestLuaAgreesWithModel checks
// that the Lua scripts do exactly the same.
type model struct {
	e       map[string]*mentry
	charges map[string]map[string]string
}

type mentry struct {
	parent                              string
	max, reserved, actual, own, overrun int64
	status                              string
	g                                   bool
}

var (
	errModelOver = errors.New("over")
)

func newModel() *model {
	return &model{e: map[string]*mentry{}, charges: map[string]map[string]string{}}
}

func (e *mentry) room() int64            { return max(e.max-e.reserved-e.actual, 0) }
func (e *mentry) activeGuaranteed() bool { return e.g && e.status == StatusActive }

// ancestorsOf lists id's ancestors parent first.
func (m *model) ancestorsOf(id string) []string {
	var out []string
	for e := m.e[id]; e != nil && e.parent != ""; e = m.e[e.parent] {
		out = append(out, e.parent)
	}
	return out
}

// levels is the entries of ids.
func (m *model) levels(ids []string) []*mentry {
	out := make([]*mentry, len(ids))
	for i, id := range ids {
		out[i] = m.e[id]
	}
	return out
}

// region is the index of the last level of the region starting at from.
func region(lv []*mentry, from int) int {
	for j := from; j < len(lv); j++ {
		if lv[j].activeGuaranteed() {
			return j
		}
	}
	return len(lv) - 1
}

// smallest is the smallest room over lv[from..to].
func smallest(lv []*mentry, from, to int) int64 {
	r := int64(-1)
	for j := from; j <= to; j++ {
		if x := lv[j].room(); r < 0 || x < r {
			r = x
		}
	}
	return max(r, 0)
}

// active is entry id when it exists and is active: ErrNotFound or
// ErrReleased when not.
func (m *model) active(id string) (*mentry, error) {
	e, ok := m.e[id]
	if !ok {
		return nil, ErrNotFound
	}
	if e.status != StatusActive {
		return nil, ErrReleased
	}
	return e, nil
}

func (m *model) register(root string, ceiling int64) error {
	if e, ok := m.e[root]; ok {
		if e.parent == "" && e.max == ceiling {
			return nil
		}
		return ErrExists
	}
	m.e[root] = &mentry{max: ceiling, status: StatusActive}
	return nil
}

// admit admits a new child of parent with ceiling, or reopens/reads an
// existing entry (parent must match); it returns the room left.
func (m *model) admit(id, parent string, ceiling int64, reopen bool) (int64, error) {
	if e, ok := m.e[id]; ok {
		if e.parent != parent {
			return 0, ErrExists
		}
		lv := m.levels(append([]string{id}, m.ancestorsOf(id)...))
		if e.status != StatusActive {
			if !reopen {
				return 0, ErrReleased
			}
			g, st := e.g, e.status
			e.g, e.status = false, StatusActive
			r := smallest(lv, 0, region(lv, 0))
			if r <= 0 {
				e.g, e.status = g, st
				return 0, ErrInsufficientBudget
			}
			return r, nil
		}
		return smallest(lv, 0, region(lv, 0)), nil
	}
	if parent == "" {
		return 0, ErrNotFound
	}
	if _, err := m.active(parent); err != nil {
		return 0, err
	}
	lv := m.levels(append([]string{parent}, m.ancestorsOf(parent)...))
	r := smallest(lv, 0, region(lv, 0))
	if r <= 0 {
		return 0, ErrInsufficientBudget
	}
	m.e[id] = &mentry{parent: parent, max: ceiling, status: StatusActive}
	return min(r, ceiling), nil
}

func (m *model) reserve(id, parent string, amt int64) error {
	if e, ok := m.e[id]; ok {
		if e.parent == parent {
			return nil
		}
		return ErrExists
	}
	if _, err := m.active(parent); err != nil {
		return err
	}
	lv := m.levels(append([]string{parent}, m.ancestorsOf(parent)...))
	last := region(lv, 0)
	if amt > smallest(lv, 0, last) {
		return ErrInsufficientBudget
	}
	for j := 0; j <= last; j++ {
		lv[j].reserved += amt
	}
	m.e[id] = &mentry{parent: parent, max: amt, status: StatusActive, g: true}
	return nil
}

// charge with abs=false adds amt under key; abs=true is ReportActual.
func (m *model) charge(id, key string, amt int64, abs bool) error {
	if key != "" {
		if prev, ok := m.charges[id][key]; ok {
			if prev == "over" {
				return errModelOver
			}
			return nil
		}
	}
	e, err := m.active(id)
	if err != nil {
		return err
	}
	if abs {
		amt = max(amt-e.own-e.overrun, 0)
	}
	lv := m.levels(append([]string{id}, m.ancestorsOf(id)...))
	last := region(lv, 0)
	r := smallest(lv, 0, last)
	applied, over := amt, int64(0)
	if amt > r {
		applied, over = r, amt-r
	}
	for j, l := range lv {
		l.actual += applied
		if j > last {
			l.reserved -= applied
		}
	}
	e.own += applied
	e.overrun += over
	outcome := "ok"
	if over > 0 {
		outcome = "over"
	}
	if key != "" {
		if m.charges[id] == nil {
			m.charges[id] = map[string]string{}
		}
		m.charges[id][key] = outcome
	}
	if over > 0 {
		return errModelOver
	}
	return nil
}

func (m *model) release(id, status string) error {
	e, ok := m.e[id]
	if !ok {
		return ErrNotFound
	}
	if e.status != StatusActive {
		return nil
	}
	if e.g {
		if give := e.max - e.actual - e.reserved; give > 0 && e.parent != "" {
			lv := m.levels(m.ancestorsOf(id))
			for j := 0; j <= region(lv, 0); j++ {
				lv[j].reserved -= give
			}
		}
	}
	e.status = status
	return nil
}

// check verifies the invariants on every entry:
//   - nothing negative, actual + reserved ≤ max;
//   - actual is live: own plus every child's actual;
//   - reserved is exactly the holds of the active guaranteed descendants
//     whose region (from their parent up to the first active guaranteed
//     level, or the root) contains the entry, a hold being what the
//     guaranteed entry has not spent (max − actual).
func (m *model) check() error {
	sub := map[string]int64{}
	held := map[string]int64{}
	for id, e := range m.e {
		sub[e.parent] += e.actual
		if !e.activeGuaranteed() {
			continue
		}
		hold := e.max - e.actual
		for p := e.parent; p != ""; p = m.e[p].parent {
			held[p] += hold
			if m.e[p].activeGuaranteed() {
				break
			}
		}
		_ = id
	}
	ids := make([]string, 0, len(m.e))
	for id := range m.e {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		e := m.e[id]
		if e.actual < 0 || e.reserved < 0 || e.own < 0 || e.overrun < 0 {
			return fmt.Errorf("%s: negative amount %+v", id, *e)
		}
		if e.actual+e.reserved > e.max {
			return fmt.Errorf("%s: actual %d + reserved %d > max %d", id, e.actual, e.reserved, e.max)
		}
		if e.actual != e.own+sub[id] {
			return fmt.Errorf("%s: actual %d, want own %d + children's %d", id, e.actual, e.own, sub[id])
		}
		if e.reserved != held[id] {
			return fmt.Errorf("%s: reserved %d, want the holds of its guaranteed descendants %d", id, e.reserved, held[id])
		}
	}
	return nil
}
