package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// maxLinks bounds the links top follows up from a thread.
const maxLinks = 100_000

// Forget deletes the Redis records (registry.Forget) of the trees whose
// artifacts Retain deleted before cutoff (Housekeep passes RecordRetention
// less Retention ago, so a record goes at least RecordRetention after its
// thread finished): a tree is the threads reachable from a top thread (one
// that is no child, continuation or fork) through children, forks and
// continuations, and it goes whole, once every one of its threads is
// finished and rid of its artifacts before cutoff, and none of them is in
// a tree or chain with an active thread (b).
// Its threads are deleted deepest first and the top last, so a pass cut
// short leaves the top, and the next pass walks what is left. A thread
// that no walk reaches and whose top is gone (Redis lost a link) goes
// alone on the same terms. It returns the number of threads forgotten.
//
// Threads are visited oldest first from a watermark of this process's, as
// Retain visits them: a top is older than its tree.
func (s *Scheduler) Forget(ctx context.Context, cutoff time.Time, b Busy) (int, error) {
	// gone says whether r may go: finished, rid of its artifacts before
	// cutoff and in no busy tree or chain.
	gone := func(r *spooltype.Record) bool {
		at, err := time.Parse(time.RFC3339, r.Extra[ArtifactsDeletedField])
		return err == nil && at.Before(cutoff) && r.Status.Terminal() && !b.Holds(r)
	}
	forgotten := 0
	err := s.sweep(ctx, &s.forgetAt, cutoff, func(_ string, r *spooltype.Record) (bool, error) {
		if r == nil {
			return true, nil
		}
		tree, settled, err := s.treeToForget(ctx, r, gone)
		if tree == nil {
			return settled, err
		}
		n, settled, err := s.forgetTree(ctx, tree)
		forgotten += n
		if n > 0 {
			s.log.Info("record retention deleted a tree's records", "thread_id", r.ThreadID, "threads", n)
		}
		return settled, err
	})
	if err != nil {
		return forgotten, fmt.Errorf("record retention: %w", err)
	}
	return forgotten, nil
}

// treeToForget returns the threads that go with r, top first: its whole
// tree when r is a top whose every thread may go, r alone when its top is
// gone and it may go. Otherwise the tree is nil, and settled and err are
// what the sweep is told of r: settled when its tree was found too large
// to walk (it stays for good), not when it goes with its top or may not
// go yet.
func (s *Scheduler) treeToForget(ctx context.Context, r *spooltype.Record, gone func(*spooltype.Record) bool) (tree []*spooltype.Record, settled bool, err error) {
	top, err := s.top(ctx, r)
	if err != nil {
		return nil, false, err
	}
	switch {
	case top == nil: // its top is gone: it goes alone
		if !gone(r) {
			return nil, false, nil
		}
		return []*spooltype.Record{r}, false, nil
	case s.tooLarge(top.ThreadID):
		return nil, true, nil
	case top.ThreadID != r.ThreadID: // it goes with its top
		return nil, false, nil
	}
	tree, ok, err := s.tree(ctx, r, gone)
	if err != nil || !ok {
		return nil, s.tooLarge(r.ThreadID), err
	}
	return tree, false, nil
}

// forgetTree deletes the records of tree deepest first and the top last,
// so that a pass cut short leaves the top. It returns the number deleted,
// and whether the tree is settled: not when a thread changed meanwhile
// (resumed: the next pass sees) or a deletion failed.
func (s *Scheduler) forgetTree(ctx context.Context, tree []*spooltype.Record) (n int, settled bool, err error) {
	for i := len(tree) - 1; i >= 0; i-- {
		err := s.o.Forget(ctx, tree[i])
		switch {
		case errors.Is(err, orchestrator.ErrNotFound): // gone with its top this pass
		case errors.Is(err, orchestrator.ErrConflict):
			return n, false, nil // changed meanwhile (resumed): the next pass sees
		case err != nil:
			return n, false, err
		default:
			n++
		}
	}
	return n, true, nil
}

// top returns the top of r's tree: the thread reached from r through the
// threads it is a child, a continuation or a fork of, which is none of
// these; nil when one on the way has no record.
func (s *Scheduler) top(ctx context.Context, r *spooltype.Record) (*spooltype.Record, error) {
	for range maxLinks {
		up := r.ParentID
		if up == "" {
			up = r.ContinuationOf
		}
		if up == "" {
			up = r.ForkedFrom
		}
		if up == "" {
			return r, nil
		}
		next, err := s.o.Record(ctx, up)
		if errors.Is(err, orchestrator.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		r = next
	}
	return nil, fmt.Errorf("thread %s: no top within %d links", r.ThreadID, maxLinks)
}

// tree returns the threads reachable from top through children, forks
// and continuations, top first and each thread before those it reaches,
// as the records registry.Forget needs (id, version, status); ok is false
// as soon as one may not go, or when there are more than
// RecordRetentionTree (then the tree is marked tooLarge, and the sweep
// goes on past it).
func (s *Scheduler) tree(ctx context.Context, top *spooltype.Record, gone func(*spooltype.Record) bool) (out []*spooltype.Record, ok bool, err error) {
	if !gone(top) {
		return nil, false, nil
	}
	w := &treeWalk{out: []*spooltype.Record{top}, seen: map[string]bool{top.ThreadID: true}, gone: gone}
	for i := 0; i < len(w.out); i++ {
		if len(w.out) > s.cfg.RecordRetentionTree {
			s.markTooLarge(top.ThreadID)
			return nil, false, nil
		}
		r := w.out[i]
		if ok, err := s.reach(ctx, w, r); err != nil || !ok {
			return nil, false, err
		}
		// What Forget needs of it: the indexes it is in are named by its
		// tenant, directive and tags.
		w.out[i] = &spooltype.Record{ThreadID: r.ThreadID, Version: r.Version, Status: r.Status,
			Tenant: r.Tenant, Directive: r.Directive, Tags: r.Tags}
	}
	return w.out, true, nil
}

// treeWalk is the state of one walk of tree: the threads reached so far,
// in the order reached, and the test each of them must pass.
type treeWalk struct {
	out  []*spooltype.Record
	seen map[string]bool
	gone func(*spooltype.Record) bool
}

// add appends the threads of rs not reached yet, and reports false as
// soon as one of them may not go.
func (w *treeWalk) add(rs ...*spooltype.Record) bool {
	for _, k := range rs {
		if w.seen[k.ThreadID] {
			continue
		}
		if !w.gone(k) {
			return false
		}
		w.seen[k.ThreadID] = true
		w.out = append(w.out, k)
	}
	return true
}

// reach adds to w the threads r reaches: its children, its forks and its
// continuation (none when the continuation has no record). ok is false as
// soon as one of them may not go.
func (s *Scheduler) reach(ctx context.Context, w *treeWalk, r *spooltype.Record) (ok bool, err error) {
	kids, err := s.o.Children(ctx, r.ThreadID)
	if err != nil {
		return false, err
	}
	forks, err := s.o.Forks(ctx, r.ThreadID)
	if err != nil {
		return false, err
	}
	if !w.add(kids...) || !w.add(forks...) {
		return false, nil
	}
	if id := r.ContinuationThreadID; id != "" && !w.seen[id] {
		next, err := s.o.Record(ctx, id)
		if err != nil && !errors.Is(err, orchestrator.ErrNotFound) {
			return false, err
		}
		if next != nil && !w.add(next) {
			return false, nil
		}
	}
	return true, nil
}

// markTooLarge marks the tree of top too large to walk, so that the
// sweeps go on past it, and says so.
func (s *Scheduler) markTooLarge(top string) {
	s.mu.Lock()
	s.large[top] = true
	s.mu.Unlock()
	s.log.Warn("record retention keeps the records of a tree too large to walk", "thread_id", top, "max", s.cfg.RecordRetentionTree)
}

// tooLarge reports whether the tree of top was found too large to walk.
func (s *Scheduler) tooLarge(top string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.large[top]
}
