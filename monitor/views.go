package monitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
)

// Statuses are the thread statuses in the order the monitor shows them.
var Statuses = []thread.Status{
	thread.StatusRunning, thread.StatusWaiting, thread.StatusCreated,
	thread.StatusCompleted, thread.StatusError, thread.StatusCancelled, thread.StatusContinued,
}

// statusCounts are the number of threads in each status.
type statusCounts struct {
	By    map[thread.Status]int64
	Total int64
	At    time.Time
}

// countThreads counts every registered thread by status: it pages through
// the threads index and reads each hash's status field in one pipeline per
// page. The result is reused for CountsTTL.
func (m *Monitor) countThreads(ctx context.Context) (*statusCounts, error) {
	m.countsMu.Lock()
	defer m.countsMu.Unlock()
	if m.counts != nil && time.Since(m.countsTime) < m.cfg.CountsTTL {
		return m.counts, nil
	}
	rdb, ks := m.cfg.Orch.Redis, m.cfg.Orch.Keys
	out := &statusCounts{By: map[thread.Status]int64{}, At: time.Now()}
	const page = 1000
	for start := int64(0); ; start += page {
		ids, err := rdb.ZRange(ctx, ks.Threads(), start, start+page-1).Result()
		if err != nil {
			return nil, fmt.Errorf("count threads: %w", err)
		}
		if len(ids) > 0 {
			pipe := rdb.Pipeline()
			for _, id := range ids {
				pipe.HGet(ctx, ks.Thread(id), "status")
			}
			cmds, err := pipe.Exec(ctx)
			if err != nil && !isNil(err) {
				return nil, fmt.Errorf("count threads: %w", err)
			}
			for _, c := range cmds {
				if s, err := c.(*redis.StringCmd).Result(); err == nil && s != "" {
					out.By[thread.Status(s)]++
					out.Total++
				}
			}
		}
		if len(ids) < page {
			break
		}
	}
	m.counts, m.countsTime = out, time.Now()
	return out, nil
}

// Node is a thread in a tree: its children, and the thread that continues
// it. The JSON matches `spool thread tree --json`.
type Node struct {
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
	Subtree      *orchestrator.Subtree `json:"subtree,omitempty"`
	Children     []*Node               `json:"children"`
	Continuation *Node                 `json:"continuation,omitempty"`
	// Truncated: the walk stopped at Config.MaxTreeNodes below here.
	Truncated bool `json:"truncated,omitempty"`
}

// live reports whether any thread of the tree has not finished.
func (n *Node) live() bool {
	if n == nil {
		return false
	}
	if !n.Status.Terminal() {
		return true
	}
	for _, k := range n.Children {
		if k.live() {
			return true
		}
	}
	return n.Continuation.live()
}

// count is the number of threads in the tree.
func (n *Node) count() int {
	if n == nil {
		return 0
	}
	c := 1 + n.Continuation.count()
	for _, k := range n.Children {
		c += k.count()
	}
	return c
}

// buildTree walks id's children (continuations are shown under the thread
// they continue, not as children) and its continuation, at most max nodes.
func (m *Monitor) buildTree(ctx context.Context, rec *queue.Record) (*Node, error) {
	left := m.cfg.MaxTreeNodes
	seen := map[string]bool{}
	var recs []*queue.Record
	nodes := map[string]*Node{}
	var walk func(r *queue.Record) (*Node, error)
	walk = func(r *queue.Record) (*Node, error) {
		seen[r.ThreadID] = true
		left--
		n := &Node{ThreadID: r.ThreadID, Directive: r.Directive, Status: r.Status, Model: r.Model, Turns: r.Cost.Turns,
			Tokens: r.Cost.Tokens(), Spend: r.Cost.Spend, SpendLimit: r.Limits.Spend, Children: []*Node{}}
		recs, nodes[r.ThreadID] = append(recs, r), n
		kids, err := m.cfg.Orch.Registry.ListChildren(ctx, r.ThreadID)
		if err != nil {
			return nil, err
		}
		for _, k := range kids {
			if k.ContinuationOf != "" || seen[k.ThreadID] {
				continue
			}
			if left <= 0 {
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
			if left <= 0 {
				n.Truncated = true
				return n, nil
			}
			next, err := m.cfg.Orch.Registry.Get(ctx, id)
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
	subs, err := m.cfg.Orch.Subtrees(ctx, recs)
	if err != nil {
		return nil, err
	}
	for id, s := range subs {
		nodes[id].Subtree = &s
	}
	return root, nil
}

// budget returns the live budget of rec's subtree, or nil when the thread
// has no ledger entry.
func (m *Monitor) budget(ctx context.Context, rec *queue.Record) (*orchestrator.Budget, error) {
	b, err := m.cfg.Orch.ThreadBudget(ctx, rec)
	if errors.Is(err, orchestrator.ErrNoBudget) {
		return nil, nil
	}
	return b, err
}

// ThreadView is everything the thread page shows; /api/threads/ID returns
// it as JSON.
type ThreadView struct {
	Thread *queue.Record        `json:"thread"`
	Chain  []*queue.Record      `json:"chain"`
	Tree   *Node                `json:"tree"`
	Budget *orchestrator.Budget `json:"budget"`
	// Live: some thread of the tree has not finished.
	Live bool `json:"live"`
}

func (m *Monitor) threadView(ctx context.Context, id string) (*ThreadView, error) {
	rec, err := m.cfg.Orch.Registry.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	v := &ThreadView{Thread: rec}
	if v.Chain, err = m.cfg.Orch.Registry.GetChain(ctx, id); err != nil {
		return nil, err
	}
	if v.Tree, err = m.buildTree(ctx, rec); err != nil {
		return nil, err
	}
	if v.Budget, err = m.budget(ctx, rec); err != nil {
		return nil, err
	}
	v.Live = v.Tree.live()
	return v, nil
}

func isNil(err error) bool { return errors.Is(err, redis.Nil) }
