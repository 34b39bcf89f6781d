package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
)

// Budget is the live budget of a thread's subtree (spooltype.Budget):
// what `spool budget show` prints and the monitor's budget card draws.
type Budget = spooltype.Budget

// BudgetChild is a child's entry in a Budget (spooltype.BudgetChild).
type BudgetChild = spooltype.BudgetChild

// ErrNoBudget means the thread has no ledger entry (its start failed before
// the ledger, or retention deleted it).
var ErrNoBudget = errors.New("no ledger entry")

// ThreadBudget returns the live budget of rec's subtree.
func (o *Orchestrator) ThreadBudget(ctx context.Context, rec *registry.Record) (*Budget, error) {
	id := rec.LedgerID()
	e, err := o.ledger.Get(ctx, id)
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
	if room, err := o.ledger.Room(ctx, id, rec.BudgetPath()); err == nil {
		b.Available, b.LimitedBy = room.Left, room.Limiter.ID
	} else if !errors.Is(err, ledger.ErrPath) {
		return nil, err
	}
	chain, err := o.reg.GetChain(ctx, id)
	if err != nil {
		chain = []*registry.Record{rec}
	}
	var kids []*registry.Record
	for _, r := range chain {
		ks, err := o.reg.ListChildren(ctx, r.ThreadID)
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
	entries, err := o.ledger.GetMany(ctx, ids)
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

// Subtree is the live spend of a chain's subtree against its ceiling
// (spooltype.Subtree).
type Subtree = spooltype.Subtree

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
	entries, err := o.ledger.GetMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Subtree, len(entries))
	for id, e := range entries {
		out[id] = Subtree{Spent: e.Actual, Max: e.Max}
	}
	return out, nil
}
