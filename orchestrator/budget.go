package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
)

// Budget is the live budget of a thread's subtree: its chain's ledger
// entry (one per continuation chain, ledger package doc), what the
// subtree can spend now, and its children's entries. It is what `spool
// budget show` prints and the monitor's budget card draws, so the two and
// the ledger's spend_exceeded messages say the same.
type Budget struct {
	// ThreadID is the thread asked about; LedgerID its chain's entry.
	ThreadID string `json:"thread_id"`
	LedgerID string `json:"ledger_id"`
	// ParentID is the parent's entry; null for a root.
	ParentID *string `json:"parent_id"`
	// Max is the subtree's ceiling; Actual the subtree's spend so far
	// (live: the chain's own turns and every descendant's); Own the
	// chain's own turns; Reserved what is set aside for guaranteed
	// descendants; Remaining Max − Actual − Reserved.
	Max       float64 `json:"max"`
	Actual    float64 `json:"actual"`
	Own       float64 `json:"own"`
	Reserved  float64 `json:"reserved"`
	Remaining float64 `json:"remaining"`
	Overrun   float64 `json:"overrun"`
	// Available is what the subtree can spend now: Remaining, or less
	// when an ancestor has less room (LimitedBy names the level).
	Available  float64 `json:"available"`
	LimitedBy  string  `json:"limited_by"`
	Status     string  `json:"status"`
	Guaranteed bool    `json:"guaranteed"`
	// Children are the entries of the children of every thread of the
	// chain.
	Children []BudgetChild `json:"children"`
}

// BudgetChild is a child's entry as its parent sees it.
type BudgetChild struct {
	ThreadID   string  `json:"thread_id"`
	Directive  string  `json:"directive"`
	Max        float64 `json:"max"`
	Actual     float64 `json:"actual"`
	Own        float64 `json:"own"`
	Reserved   float64 `json:"reserved"`
	Remaining  float64 `json:"remaining"`
	Status     string  `json:"status"`
	Guaranteed bool    `json:"guaranteed"`
}

// Percent returns v as a share of Max, 0 to 100.
func (b *Budget) Percent(v float64) float64 {
	if b.Max <= 0 {
		return 0
	}
	return min(100, max(0, v/b.Max*100))
}

// ErrNoBudget means the thread has no ledger entry (its start failed before
// the ledger, or retention deleted it).
var ErrNoBudget = errors.New("no ledger entry")

// ThreadBudget returns the live budget of rec's subtree.
func (o *Orchestrator) ThreadBudget(ctx context.Context, rec *registry.Record) (*Budget, error) {
	id := rec.LedgerID()
	e, err := o.Ledger.Get(ctx, id)
	if errors.Is(err, ledger.ErrNotFound) {
		return nil, fmt.Errorf("thread %q: %w", rec.ThreadID, ErrNoBudget)
	}
	if err != nil {
		return nil, err
	}
	b := &Budget{ThreadID: rec.ThreadID, LedgerID: id, Max: e.Max, Actual: e.Actual, Own: e.Own, Reserved: e.Reserved,
		Remaining: e.Remaining, Overrun: e.Overrun, Available: e.Remaining, LimitedBy: id, Status: e.Status,
		Guaranteed: e.Guaranteed, Children: []BudgetChild{}}
	if e.ParentID != "" {
		b.ParentID = &e.ParentID
	}
	if room, err := o.Ledger.Room(ctx, id, rec.BudgetPath()); err == nil {
		b.Available, b.LimitedBy = room.Left, room.Limiter.ID
	} else if !errors.Is(err, ledger.ErrPath) {
		return nil, err
	}
	chain, err := o.Registry.GetChain(ctx, id)
	if err != nil {
		chain = []*registry.Record{rec}
	}
	var kids []*registry.Record
	for _, r := range chain {
		ks, err := o.Registry.ListChildren(ctx, r.ThreadID)
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			if k.ContinuationOf == "" { // a continuation is its chain's, not a child
				kids = append(kids, k)
			}
		}
	}
	ids := make([]string, len(kids))
	for i, k := range kids {
		ids[i] = k.LedgerID()
	}
	entries, err := o.Ledger.GetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	for _, k := range kids {
		ke, ok := entries[k.LedgerID()]
		if !ok {
			continue
		}
		b.Children = append(b.Children, BudgetChild{ThreadID: k.ThreadID, Directive: k.Directive, Max: ke.Max, Actual: ke.Actual,
			Own: ke.Own, Reserved: ke.Reserved, Remaining: ke.Remaining, Status: ke.Status, Guaranteed: ke.Guaranteed})
	}
	return b, nil
}

// Subtree is the live spend of a chain's subtree against its ceiling,
// for tree views.
type Subtree struct {
	Spent float64 `json:"spent"`
	Max   float64 `json:"max"`
}

// Subtrees returns the Subtree of each record that is the first thread
// of its chain (the one whose id keys the chain's ledger entry), by
// thread id; the others and records without an entry are left out.
func (o *Orchestrator) Subtrees(ctx context.Context, recs []*registry.Record) (map[string]Subtree, error) {
	var ids []string
	for _, r := range recs {
		if r.LedgerID() == r.ThreadID {
			ids = append(ids, r.ThreadID)
		}
	}
	entries, err := o.Ledger.GetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Subtree, len(entries))
	for id, e := range entries {
		out[id] = Subtree{Spent: e.Actual, Max: e.Max}
	}
	return out, nil
}
