package orchestrator

import (
	"context"
	"errors"

	"github.com/spool-run/spool/queue"
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
	// Truncated: the walk stopped at its node limit below here.
	Truncated bool `json:"truncated,omitempty"`
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
// they continue, not as children) and its continuation, at most maxNodes
// threads (0: no bound; a node whose walk stopped is Truncated), and
// gives each chain's first thread its live Subtree spend.
func (o *Orchestrator) Tree(ctx context.Context, rec *queue.Record, maxNodes int) (*TreeNode, error) {
	left := maxNodes
	if left <= 0 {
		left = -1
	}
	seen := map[string]bool{}
	var recs []*queue.Record
	nodes := map[string]*TreeNode{}
	var walk func(r *queue.Record) (*TreeNode, error)
	walk = func(r *queue.Record) (*TreeNode, error) {
		seen[r.ThreadID] = true
		left--
		n := &TreeNode{ThreadID: r.ThreadID, Directive: r.Directive, Status: r.Status, Model: r.Model, Turns: r.Cost.Turns,
			Tokens: r.Cost.Tokens(), Spend: r.Cost.Spend, SpendLimit: r.Limits.Spend, Children: []*TreeNode{}}
		recs, nodes[r.ThreadID] = append(recs, r), n
		kids, err := o.Registry.ListChildren(ctx, r.ThreadID)
		if err != nil {
			return nil, err
		}
		for _, k := range kids {
			if k.ContinuationOf != "" || seen[k.ThreadID] {
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
			n.Children = append(n.Children, kn)
		}
		if id := r.ContinuationThreadID; id != "" && !seen[id] {
			if left == 0 {
				n.Truncated = true
				return n, nil
			}
			next, err := o.Registry.Get(ctx, id)
			if errors.Is(err, queue.ErrNotFound) {
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
