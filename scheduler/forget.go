package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/registry"
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
	gone := func(r *registry.Record) bool {
		at, err := time.Parse(time.RFC3339, r.Extra[ArtifactsDeletedField])
		return err == nil && at.Before(cutoff) && r.Status.Terminal() && !b.Holds(r)
	}
	forgotten := 0
	err := s.sweep(ctx, &s.forgetAt, cutoff, func(_ string, r *registry.Record) (bool, error) {
		if r == nil {
			return true, nil
		}
		top, err := s.top(ctx, r)
		if err != nil {
			return false, err
		}
		var tree []*registry.Record
		switch {
		case top == nil: // its top is gone: it goes alone
			if !gone(r) {
				return false, nil
			}
			tree = []*registry.Record{r}
		case s.tooLarge(top.ThreadID):
			return true, nil
		case top.ThreadID != r.ThreadID: // it goes with its top
			return false, nil
		default:
			ok := false
			if tree, ok, err = s.tree(ctx, r, gone); err != nil || !ok {
				return s.tooLarge(r.ThreadID), err
			}
		}
		n := 0
		defer func() {
			forgotten += n
			if n > 0 {
				s.log.Info("record retention deleted a tree's records", "thread_id", r.ThreadID, "threads", n)
			}
		}()
		for i := len(tree) - 1; i >= 0; i-- {
			err := s.o.Forget(ctx, tree[i])
			switch {
			case errors.Is(err, registry.ErrNotFound): // gone with its top this pass
			case errors.Is(err, registry.ErrConflict):
				return false, nil // changed meanwhile (resumed): the next pass sees
			case err != nil:
				return false, err
			default:
				n++
			}
		}
		return true, nil
	})
	if err != nil {
		return forgotten, fmt.Errorf("record retention: %w", err)
	}
	return forgotten, nil
}

// top returns the top of r's tree: the thread reached from r through the
// threads it is a child, a continuation or a fork of, which is none of
// these; nil when one on the way has no record.
func (s *Scheduler) top(ctx context.Context, r *registry.Record) (*registry.Record, error) {
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
		if errors.Is(err, registry.ErrNotFound) {
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
func (s *Scheduler) tree(ctx context.Context, top *registry.Record, gone func(*registry.Record) bool) (out []*registry.Record, ok bool, err error) {
	if !gone(top) {
		return nil, false, nil
	}
	out = []*registry.Record{top}
	seen := map[string]bool{top.ThreadID: true}
	add := func(rs ...*registry.Record) bool {
		for _, k := range rs {
			if seen[k.ThreadID] {
				continue
			}
			if !gone(k) {
				return false
			}
			seen[k.ThreadID] = true
			out = append(out, k)
		}
		return true
	}
	for i := 0; i < len(out); i++ {
		if len(out) > s.cfg.RecordRetentionTree {
			s.mu.Lock()
			s.large[top.ThreadID] = true
			s.mu.Unlock()
			s.log.Warn("record retention keeps the records of a tree too large to walk", "thread_id", top.ThreadID, "max", s.cfg.RecordRetentionTree)
			return nil, false, nil
		}
		r := out[i]
		kids, err := s.o.Children(ctx, r.ThreadID)
		if err != nil {
			return nil, false, err
		}
		forks, err := s.o.Forks(ctx, r.ThreadID)
		if err != nil {
			return nil, false, err
		}
		if !add(kids...) || !add(forks...) {
			return nil, false, nil
		}
		if id := r.ContinuationThreadID; id != "" && !seen[id] {
			next, err := s.o.Record(ctx, id)
			if err != nil && !errors.Is(err, registry.ErrNotFound) {
				return nil, false, err
			}
			if next != nil && !add(next) {
				return nil, false, nil
			}
		}
		out[i] = &registry.Record{ThreadID: r.ThreadID, Version: r.Version, Status: r.Status}
	}
	return out, true, nil
}

// tooLarge reports whether the tree of top was found too large to walk.
func (s *Scheduler) tooLarge(top string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.large[top]
}
