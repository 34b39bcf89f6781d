package registry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/thread"
)

// Continuation chains (spec/continuation-and-resumption.md): a linked list
// of threads that are one logical execution. Each record holds
// continuation_thread_id (forward), continuation_of (backward) and
// chain_root_id (the first thread).
//
//	A (continued) ──continuation_thread_id──▶ B (continued) ──▶ C (completed)
//	A ◀──continuation_of── B ◀──continuation_of── C;  chain_root_id = A

// LinkContinuation links old → new in one atomic script: old gets the
// forward pointer and status continued, published, leaving the active set:
// from running (a handoff) or from completed, error or cancelled (a user
// resume: the spec's set_continuation, so resolve_thread_chain, waits and a
// second resume through old reach new). Old's result and error stay. new gets continuation_of = old, chain_root_id = old's
// chain root, previous_thread_id = old if unset. Old's version is bumped;
// new's only when the link writes one of those (a continuation registered
// with them, as orchestrator.Start registers one, keeps the version its
// claimer holds). Both versions are returned. Linking the same pair again
// is a no-op; a link that would
// overwrite another link is ErrChainLinked; old in created or waiting is a
// *thread.TransitionError.
func (r *Registry) LinkContinuation(ctx context.Context, oldID, newID string) (oldVersion, newVersion int64, err error) {
	keys := []string{r.ks.Thread(oldID), r.ks.Active(oldID), r.ks.Events(oldID), r.ks.Thread(newID)}
	return r.link(ctx, keys, oldID, newID)
}

// SetContinuation is the spec's set_continuation: the forward pointer only,
// with LinkContinuation's status rule for id. Returns id's new version.
func (r *Registry) SetContinuation(ctx context.Context, id, contID string) (int64, error) {
	v, _, err := r.link(ctx, []string{r.ks.Thread(id), r.ks.Active(id), r.ks.Events(id)}, id, contID)
	return v, err
}

func (r *Registry) link(ctx context.Context, keys []string, oldID, newID string) (int64, int64, error) {
	if oldID == "" || newID == "" {
		return 0, 0, fmt.Errorf("link continuation: empty thread id (old %q, new %q)", oldID, newID)
	}
	res, err := regLinkScript.Run(ctx, r.rdb, keys, oldID, newID, r.now().UTC().Format(time.RFC3339Nano)).Int64Slice()
	if err != nil {
		return 0, 0, scriptError(fmt.Sprintf("link continuation %q → %q", oldID, newID), oldID, 0, err)
	}
	if len(res) != 2 {
		return 0, 0, reply.Unexpected("registry link", res)
	}
	return res[0], res[1], nil
}

// SetChainInfo is the spec's set_chain_info: id's chain root and backward
// pointer, at any version. Returns id's new version.
func (r *Registry) SetChainInfo(ctx context.Context, id, rootID, continuationOf string) (int64, error) {
	if rootID == "" {
		return 0, fmt.Errorf("set chain info of %q: empty chain root", id)
	}
	if continuationOf == id {
		return 0, fmt.Errorf("set chain info of %q: a thread cannot continue itself", id)
	}
	v, err := r.commit(ctx, id, 0, "", nil, []any{"chain_root_id", rootID, "continuation_of", continuationOf})
	if err != nil {
		return 0, fmt.Errorf("set chain info: %w", err)
	}
	return v, nil
}

// GetChain returns the continuation chain id belongs to, root first: it
// walks back along continuation_of to the root, then forward along
// continuation_thread_id. Both walks stop at a thread already seen
// (corrupted data cannot loop) or at a missing record. ErrNotFound when id
// itself is not registered.
func (r *Registry) GetChain(ctx context.Context, id string) ([]*Record, error) {
	start, err := r.Get(ctx, id)
	if err != nil {
		return nil, fmt.Errorf("get chain: %w", err)
	}
	root := start
	seen := map[string]bool{start.ThreadID: true}
	for root.ContinuationOf != "" && !seen[root.ContinuationOf] {
		prev, err := r.Get(ctx, root.ContinuationOf)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("get chain of %q: %w", id, err)
		}
		seen[prev.ThreadID] = true
		root = prev
	}
	chain := []*Record{root}
	seen = map[string]bool{root.ThreadID: true}
	for cur := root; cur.ContinuationThreadID != "" && !seen[cur.ContinuationThreadID]; {
		next, err := r.Get(ctx, cur.ContinuationThreadID)
		if errors.Is(err, ErrNotFound) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("get chain of %q: %w", id, err)
		}
		seen[next.ThreadID] = true
		chain = append(chain, next)
		cur = next
	}
	return chain, nil
}

// ResolveChain is exactly the spec's resolve_thread_chain: from id, follow
// continuation_thread_id while the thread is continued, and return the id
// the chain currently ends in. A thread seen twice (a cycle in corrupted
// data), a missing record (its id is returned, as the spec does) or a
// continued thread without a pointer ends the walk.
func (r *Registry) ResolveChain(ctx context.Context, id string) (string, error) {
	res, err := r.resolve(ctx, id)
	return res.end, err
}

// resolved is where a chain walk ended.
type resolved struct {
	rec     *Record // the last record found (nil: id itself is not registered)
	end     string  // the spec's answer
	missing bool    // the walk ended at an id with no record
}

// resolve walks like ResolveChain and also returns the last record found.
func (r *Registry) resolve(ctx context.Context, id string) (resolved, error) {
	visited := map[string]bool{}
	var last *Record
	cur := id
	for {
		if visited[cur] {
			return resolved{rec: last, end: cur}, nil
		}
		visited[cur] = true
		rec, err := r.Get(ctx, cur)
		if errors.Is(err, ErrNotFound) {
			return resolved{rec: last, end: cur, missing: true}, nil
		}
		if err != nil {
			return resolved{}, fmt.Errorf("resolve chain of %q: %w", id, err)
		}
		last = rec
		if rec.Status != thread.StatusContinued || rec.ContinuationThreadID == "" {
			return resolved{rec: rec, end: cur}, nil
		}
		cur = rec.ContinuationThreadID
	}
}
