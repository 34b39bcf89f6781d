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
	w := &treeWalk{o: o, left: maxNodes, seen: map[string]bool{}, nodes: map[string]*TreeNode{}}
	if w.left <= 0 {
		w.left = -1
	}
	root, err := w.walk(ctx, rec)
	if err != nil {
		return nil, err
	}
	subs, err := o.Subtrees(ctx, w.recs)
	if err != nil {
		return nil, err
	}
	for id, s := range subs {
		w.nodes[id].Subtree = &s
	}
	return root, nil
}

// treeWalk is one Tree: the threads walked, as records and as nodes, and
// how many more it may walk (-1: no bound).
type treeWalk struct {
	o     *Orchestrator
	left  int
	seen  map[string]bool
	recs  []*registry.Record
	nodes map[string]*TreeNode
}

// walk makes r's node and walks its children, its forks and its
// continuation.
func (w *treeWalk) walk(ctx context.Context, r *registry.Record) (*TreeNode, error) {
	w.seen[r.ThreadID] = true
	w.left--
	n := treeNode(r)
	w.recs, w.nodes[r.ThreadID] = append(w.recs, r), n
	kids, err := w.walkAll(ctx, n, r, w.o.reg.ListChildren, true)
	if err != nil {
		return nil, err
	}
	n.Children = append(n.Children, kids...)
	if n.Forks, err = w.walkAll(ctx, n, r, w.o.reg.ListForks, false); err != nil {
		return nil, err
	}
	if err := w.continuation(ctx, n, r); err != nil {
		return nil, err
	}
	return n, nil
}

// treeNode is r's node, without the threads under it.
func treeNode(r *registry.Record) *TreeNode {
	n := &TreeNode{ThreadID: r.ThreadID, Directive: r.Directive, Status: r.Status, Model: r.Model, Turns: r.Cost.Turns,
		Tokens: r.Cost.Tokens(), Spend: r.Cost.Spend, SpendLimit: r.Limits.Spend, Children: []*TreeNode{},
		ForkedFrom: r.ForkedFrom, ForkTurn: r.ForkTurn, Kind: r.Kind, DroppedCapabilities: r.DroppedCapabilities}
	if r.IsGraph() {
		// A node's spend is its own; a run makes no model calls, and
		// its record's spend is its subtree's (Subtree says it).
		n.CurrentNode, n.Step, n.Spend = r.CurrentNode, r.Step, 0
	}
	return n
}

// walkAll walks the records that list names for r, as nodes under n; a
// child (children) that continues or forks another thread is shown there
// instead. A walk stopped by the bound marks n Truncated.
func (w *treeWalk) walkAll(ctx context.Context, n *TreeNode, r *registry.Record,
	list func(context.Context, string) ([]*registry.Record, error), children bool) ([]*TreeNode, error) {
	got, err := list(ctx, r.ThreadID)
	if err != nil {
		return nil, err
	}
	var out []*TreeNode
	for _, k := range got {
		if w.seen[k.ThreadID] || children && (k.ContinuationOf != "" || k.ForkedFrom != "") {
			continue
		}
		if w.left == 0 {
			n.Truncated = true
			break
		}
		kn, err := w.walk(ctx, k)
		if err != nil {
			return nil, err
		}
		out = append(out, kn)
	}
	return out, nil
}

// continuation walks the thread that continues r, if any, as n's
// Continuation.
func (w *treeWalk) continuation(ctx context.Context, n *TreeNode, r *registry.Record) error {
	id := r.ContinuationThreadID
	if id == "" || w.seen[id] {
		return nil
	}
	if w.left == 0 {
		n.Truncated = true
		return nil
	}
	next, err := w.o.reg.Get(ctx, id)
	if errors.Is(err, registry.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	n.Continuation, err = w.walk(ctx, next)
	return err
}
