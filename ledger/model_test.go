package ledger

import (
	"errors"
	"fmt"
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
}

var (
	errModelNotFound     = ErrNotFound
	errModelExists       = ErrExists
	errModelInsufficient = ErrInsufficientBudget
	errModelReleased     = ErrReleased
	errModelOver         = errors.New("over")
	errModelAncestors    = errors.New("ancestors")
)

func newModel() *model {
	return &model{e: map[string]*mentry{}, charges: map[string]map[string]string{}}
}

func (m *model) register(root string, max int64) error {
	if e, ok := m.e[root]; ok {
		if e.parent == "" && e.max == max {
			return nil
		}
		return errModelExists
	}
	m.e[root] = &mentry{max: max, status: StatusActive}
	return nil
}

func (m *model) reserve(child, parent string, amt int64) error {
	if e, ok := m.e[child]; ok {
		if e.parent == parent {
			return nil
		}
		return errModelExists
	}
	p, ok := m.e[parent]
	if !ok {
		return errModelNotFound
	}
	if p.status != StatusActive {
		return errModelReleased
	}
	if amt > p.max-p.reserved-p.actual {
		return errModelInsufficient
	}
	p.reserved += amt
	m.e[child] = &mentry{parent: parent, max: amt, status: StatusActive}
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
	e, ok := m.e[id]
	if !ok {
		return errModelNotFound
	}
	if e.status != StatusActive {
		return errModelReleased
	}
	if abs {
		amt -= e.own + e.overrun
		if amt <= 0 {
			return nil
		}
	}
	room := max(e.max-e.reserved-e.actual, 0)
	applied, over := amt, int64(0)
	if amt > room {
		applied, over = room, amt-room
	}
	e.actual += applied
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

func (m *model) release(id string, ancestors []string, status string) error {
	e, ok := m.e[id]
	if !ok {
		return errModelNotFound
	}
	if e.status != StatusActive {
		return nil
	}
	var path []*mentry
	expect := e.parent
	for i := 0; expect != ""; i++ {
		if i >= len(ancestors) || ancestors[i] != expect {
			return errModelAncestors
		}
		a, ok := m.e[expect]
		if !ok {
			return errModelAncestors
		}
		path = append(path, a)
		if a.status == StatusActive {
			break
		}
		expect = a.parent
	}
	dres, dact := e.reserved-e.max, e.actual
	for _, a := range path {
		a.reserved += dres
		a.actual += dact
	}
	e.status = status
	return nil
}

// ancestorsOf lists id's ancestors parent first.
func (m *model) ancestorsOf(id string) []string {
	var out []string
	for e := m.e[id]; e != nil && e.parent != ""; e = m.e[e.parent] {
		out = append(out, e.parent)
	}
	return out
}

// check verifies the invariant on every entry.
func (m *model) check() error {
	for id, e := range m.e {
		if e.actual < 0 || e.reserved < 0 || e.own < 0 || e.overrun < 0 {
			return fmt.Errorf("%s: negative amount %+v", id, *e)
		}
		if e.actual+e.reserved > e.max {
			return fmt.Errorf("%s: actual %d + reserved %d > max %d", id, e.actual, e.reserved, e.max)
		}
	}
	return nil
}
