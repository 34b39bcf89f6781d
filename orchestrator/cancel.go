package orchestrator

import (
	"context"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// CancelResult is what a cancel request did: `spool thread cancel --json`
// prints it and the API returns it.
type CancelResult struct {
	Success bool `json:"success"`
	// ThreadID is the thread the chain had reached, the one cancelled;
	// Status its status after the request.
	ThreadID string        `json:"thread_id"`
	Status   thread.Status `json:"status"`
	// CancelRequested is false when that thread had finished already:
	// there was nothing to cancel.
	CancelRequested bool `json:"cancel_requested"`
}

// CancelChain cancels the thread that id's continuation chain has reached
// (Cancel), unless it has finished already. An unknown id is
// registry.ErrNotFound.
func (o *Orchestrator) CancelChain(ctx context.Context, id string, cascade bool) (*CancelResult, error) {
	if _, err := o.Registry.Get(ctx, id); err != nil {
		return nil, err
	}
	cur, err := o.Registry.ResolveChain(ctx, id)
	if err != nil {
		return nil, err
	}
	r, err := o.Registry.Get(ctx, cur)
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

// Chain is a continuation chain, first thread first: what `spool thread
// chain --json` prints and the API returns.
type Chain struct {
	Success     bool               `json:"success"`
	ChainLength int                `json:"chain_length"`
	Chain       []*registry.Record `json:"chain"`
	// Forks are the threads forked from the chain's threads, oldest
	// first; each is the first thread of a chain of its own (its record
	// names the thread and turn it was forked from).
	Forks []*registry.Record `json:"forks,omitempty"`
}

// GetChain returns the continuation chain id belongs to. An unknown id is
// registry.ErrNotFound.
func (o *Orchestrator) GetChain(ctx context.Context, id string) (*Chain, error) {
	chain, err := o.Registry.GetChain(ctx, id)
	if err != nil {
		return nil, err
	}
	ch := &Chain{Success: true, ChainLength: len(chain), Chain: chain}
	for _, r := range chain {
		forks, err := o.Registry.ListForks(ctx, r.ThreadID)
		if err != nil {
			return nil, err
		}
		ch.Forks = append(ch.Forks, forks...)
	}
	return ch, nil
}
