package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/urfave/cli/v2"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
)

// ownTree is the tree an --embedded run's in-process worker serves when
// the run opened the data dir's embedded Redis itself: its own thread,
// that thread's children and continuations, and theirs. What an earlier
// run left unfinished there (children of a run interrupted with Ctrl-C)
// is left to `spool dev`, which resumes it: an --embedded run does what
// it was asked, in the time that takes (worker.Config.Serves).
type ownTree struct {
	o *orchestrator.Orchestrator
	// leftovers is how many threads were unfinished before the run.
	leftovers int

	once  sync.Once
	ready chan struct{} // closed once root is known (or the start failed)
	root  string

	mu sync.Mutex
	in map[string]bool // thread id → of the tree
}

// newOwnTree is the scope of an --embedded run on s, or nil when the run
// serves every thread: on a Redis it did not start (a dev's, a
// configured one), whose other threads are others' work.
func newOwnTree(c *cli.Context, s *services) (*ownTree, error) {
	if !c.Bool("embedded") || s.embedded == nil {
		return nil, nil
	}
	active, err := s.orch.Active(c.Context)
	if err != nil {
		return nil, err
	}
	return &ownTree{o: s.orch, leftovers: len(active), ready: make(chan struct{}), in: map[string]bool{}}, nil
}

// serves is the worker's Config.Serves, nil for a nil tree (every thread).
func (t *ownTree) serves() func(context.Context, string) (bool, error) {
	if t == nil {
		return nil
	}
	return t.has
}

// started says the run's thread is id (its start is enqueued: the worker
// may already hold its task, waiting in has) and says, on stderr, what
// the run leaves alone.
func (t *ownTree) started(c *cli.Context, s *services, id string) {
	if t == nil {
		return
	}
	t.once.Do(func() { t.root = id; close(t.ready) })
	if t.leftovers > 0 && s.embedded.Persistent {
		fmt.Fprintf(c.App.ErrWriter, "spool: this run runs its own thread's tree only: %s of earlier runs in %s wait for `spool dev` there\n",
			thread.Count(t.leftovers, "unfinished thread", "unfinished threads"), s.dataDir)
	}
}

// done ends the wait of has when the run's thread did not start.
func (t *ownTree) done() {
	if t != nil {
		t.once.Do(func() { close(t.ready) })
	}
}

// has reports whether thread id is of the tree: the root, or a thread
// whose parent or whose predecessor in a continuation chain is. A thread
// with no record is served (the worker drops its task).
func (t *ownTree) has(ctx context.Context, id string) (bool, error) {
	select {
	case <-t.ready:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	if t.root == "" {
		return false, nil
	}
	return t.of(ctx, id, 0)
}

// of is has for id, depth links below the thread asked about.
func (t *ownTree) of(ctx context.Context, id string, depth int) (bool, error) {
	if id == "" || depth > 1000 {
		return false, nil
	}
	if id == t.root {
		return true, nil
	}
	t.mu.Lock()
	in, known := t.in[id]
	t.mu.Unlock()
	if known {
		return in, nil
	}
	rec, err := t.o.Record(ctx, id)
	if errors.Is(err, orchestrator.ErrNotFound) {
		return depth == 0, nil
	}
	if err != nil {
		return false, err
	}
	for _, up := range []string{rec.ParentID, rec.ContinuationOf} {
		if in, err = t.of(ctx, up, depth+1); err != nil || in {
			break
		}
	}
	if err != nil {
		return false, err
	}
	// A thread's parent and predecessor never change: nor does the answer.
	t.mu.Lock()
	t.in[id] = in
	t.mu.Unlock()
	return in, nil
}
