package orchestrator

import (
	"context"
	"errors"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TreeNode is a thread in a tree: its children, and the thread that
// continues it. It is what `spool thread tree --json`, the monitor's
// thread page and the API's tree route show.
type TreeNode struct {
	ThreadID   string        `json:"thread_id"`
	Directive  string        `json:"directive"`
	Status     thread.Status `json:"status"`
	Model      string        `json:"model,omitempty"`
	Turns      int           `json:"turns"`
	Tokens     int           `json:"tokens"`
	Spend      float64       `json:"spend"`
	SpendLimit float64       `json:"spend_limit"`
	// Subtree is the live spend of the thread's subtree against its
	// ceiling, on the first thread of each continuation chain (the chain
	// shares one ledger entry).
	Subtree      *Subtree    `json:"subtree,omitempty"`
	Children     []*TreeNode `json:"children"`
	Continuation *TreeNode   `json:"continuation,omitempty"`
	// ForkedFrom and ForkTurn: the thread is a fork of ForkedFrom at that
	// turn (`spool thread fork`). Forks are the threads forked from this
	// one, each the first of a chain of its own (a fork of a child is also
	// its parent's child, shown here and not among the parent's children).
	ForkedFrom string      `json:"forked_from,omitempty"`
	ForkTurn   int         `json:"fork_turn,omitempty"`
	Forks      []*TreeNode `json:"forks,omitempty"`
	// Truncated: the walk stopped at its node limit below here.
	Truncated bool `json:"truncated,omitempty"`
	// Kind is "graph" for a graph run ("thread" otherwise); a run's
	// CurrentNode and Step are its cursor (registry.Record), and a
	// graph fork's ForkTurn is the step it was forked at.
	Kind        string `json:"kind,omitempty"`
	CurrentNode string `json:"current_node,omitempty"`
	Step        int    `json:"step,omitempty"`
	// DroppedCapabilities are what the thread's directive asks for that
	// its parent does not hold (registry.Record): it runs without them.
	DroppedCapabilities []string `json:"dropped_capabilities,omitempty"`
}

// Live reports whether any thread of the tree has not finished.
func (n *TreeNode) Live() bool {
	if n == nil {
		return false
	}
	if !n.Status.Terminal() {
		return true
	}
	for _, k := range n.Children {
		if k.Live() {
			return true
		}
	}
	return n.Continuation.Live()
}

// Tree walks rec's children (continuations are shown under the thread
// they continue, not as children; forks under the thread they were forked
// from), its forks and its continuation, at most maxNodes
// threads (0: no bound; a node whose walk stopped is Truncated), and
// gives each chain's first thread its live Subtree spend.
func (o *Orchestrator) Tree(ctx context.Context, rec *registry.Record, maxNodes int) (*TreeNode, error) {
	left := maxNodes
	if left <= 0 {
		left = -1
	}
	seen := map[string]bool{}
	var recs []*registry.Record
	nodes := map[string]*TreeNode{}
	var walk func(r *registry.Record) (*TreeNode, error)
	walk = func(r *registry.Record) (*TreeNode, error) {
		seen[r.ThreadID] = true
		left--
		n := &TreeNode{ThreadID: r.ThreadID, Directive: r.Directive, Status: r.Status, Model: r.Model, Turns: r.Cost.Turns,
			Tokens: r.Cost.Tokens(), Spend: r.Cost.Spend, SpendLimit: r.Limits.Spend, Children: []*TreeNode{},
			ForkedFrom: r.ForkedFrom, ForkTurn: r.ForkTurn, Kind: r.Kind, DroppedCapabilities: r.DroppedCapabilities}
		if r.IsGraph() {
			// A node's spend is its own; a run makes no model calls, and
			// its record's spend is its subtree's (Subtree says it).
			n.CurrentNode, n.Step, n.Spend = r.CurrentNode, r.Step, 0
		}
		recs, nodes[r.ThreadID] = append(recs, r), n
		// walkAll walks the records a list names, as nodes; a child that
		// continues or forks another thread is shown there instead.
		walkAll := func(list func(context.Context, string) ([]*registry.Record, error), children bool) ([]*TreeNode, error) {
			got, err := list(ctx, r.ThreadID)
			if err != nil {
				return nil, err
			}
			var out []*TreeNode
			for _, k := range got {
				if seen[k.ThreadID] || children && (k.ContinuationOf != "" || k.ForkedFrom != "") {
					continue
				}
				if left == 0 {
					n.Truncated = true
					break
				}
				kn, err := walk(k)
				if err != nil {
					return nil, err
				}
				out = append(out, kn)
			}
			return out, nil
		}
		kids, err := walkAll(o.Registry.ListChildren, true)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, kids...)
		if n.Forks, err = walkAll(o.Registry.ListForks, false); err != nil {
			return nil, err
		}
		if id := r.ContinuationThreadID; id != "" && !seen[id] {
			if left == 0 {
				n.Truncated = true
				return n, nil
			}
			next, err := o.Registry.Get(ctx, id)
			if errors.Is(err, registry.ErrNotFound) {
				return n, nil
			}
			if err != nil {
				return nil, err
			}
			if n.Continuation, err = walk(next); err != nil {
				return nil, err
			}
		}
		return n, nil
	}
	root, err := walk(rec)
	if err != nil {
		return nil, err
	}
	subs, err := o.Subtrees(ctx, recs)
	if err != nil {
		return nil, err
	}
	for id, s := range subs {
		nodes[id].Subtree = &s
	}
	return root, nil
}
