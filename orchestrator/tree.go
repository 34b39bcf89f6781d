package orchestrator

import (
	"context"
	"errors"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
)

// TreeNode is a thread in a tree: its children, and the thread that
// continues it (spooltype.TreeNode). It is what `spool thread tree
// --json`, the monitor's thread page and the API's tree route show.
type TreeNode = spooltype.TreeNode

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
		kids, err := walkAll(o.reg.ListChildren, true)
		if err != nil {
			return nil, err
		}
		n.Children = append(n.Children, kids...)
		if n.Forks, err = walkAll(o.reg.ListForks, false); err != nil {
			return nil, err
		}
		if id := r.ContinuationThreadID; id != "" && !seen[id] {
			if left == 0 {
				n.Truncated = true
				return n, nil
			}
			next, err := o.reg.Get(ctx, id)
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
