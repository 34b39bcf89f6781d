package orchestrator

import (
	"context"

	"github.com/spool-run/spool/spooltype"
)

// CancelResult is what a cancel request did (spooltype.CancelResult).
type CancelResult = spooltype.CancelResult

// CancelChain cancels the thread that id's continuation chain has reached
// (Cancel), unless it has finished already. An unknown id is
// registry.ErrNotFound.
func (o *Orchestrator) CancelChain(ctx context.Context, id string, cascade bool) (*CancelResult, error) {
	if _, err := o.reg.Get(ctx, id); err != nil {
		return nil, err
	}
	r, err := o.Latest(ctx, id)
	if err != nil {
		return nil, err
	}
	requested := false
	if !r.Status.Terminal() {
		if r, err = o.Cancel(ctx, id, cascade); err != nil {
			return nil, err
		}
		requested = true
	}
	return &CancelResult{Success: true, ThreadID: r.ThreadID, Status: r.Status, CancelRequested: requested}, nil
}

// Chain is a continuation chain, first thread first (spooltype.Chain).
type Chain = spooltype.Chain

// GetChain returns the continuation chain id belongs to. An unknown id is
// registry.ErrNotFound.
func (o *Orchestrator) GetChain(ctx context.Context, id string) (*Chain, error) {
	chain, err := o.reg.GetChain(ctx, id)
	if err != nil {
		return nil, err
	}
	ch := &Chain{Success: true, ChainLength: len(chain), Chain: chain}
	for _, r := range chain {
		forks, err := o.reg.ListForks(ctx, r.ThreadID)
		if err != nil {
			return nil, err
		}
		ch.Forks = append(ch.Forks, forks...)
	}
	return ch, nil
}
