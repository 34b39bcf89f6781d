package monitor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// Statuses are the thread statuses in the order the monitor shows them.
var Statuses = []thread.Status{
	thread.StatusRunning, thread.StatusWaiting, thread.StatusPaused, thread.StatusCreated,
	thread.StatusCompleted, thread.StatusError, thread.StatusCancelled, thread.StatusContinued,
}

// statusCounts are the number of threads in each status.
type statusCounts struct {
	By    map[thread.Status]int64
	Total int64
	At    time.Time
}

// countsDuty is how many times as long as a count took its result is
// reused at least: Redis spends at most about 1/countsDuty of its time
// counting for a monitor, however many threads are registered.
const countsDuty = 30

// countsReused says whether counts made age ago in took are still served,
// with ttl the configured CountsTTL (negative: never).
func countsReused(ttl, took, age time.Duration) bool {
	return ttl >= 0 && age < max(ttl, countsDuty*took)
}

// countThreads counts every registered thread by status: it pages through
// the threads index and reads each hash's status field in one pipeline per
// page. The result is reused (countsReused), and concurrent requests wait
// for one count.
func (m *Monitor) countThreads(ctx context.Context) (*statusCounts, error) {
	m.countsMu.Lock()
	defer m.countsMu.Unlock()
	if m.counts != nil && countsReused(m.cfg.CountsTTL, m.countsTook, time.Since(m.countsTime)) {
		return m.counts, nil
	}
	began := time.Now()
	out := &statusCounts{By: map[thread.Status]int64{}, At: time.Now()}
	const page = 1000
	for start := int64(0); ; start += page {
		zs, err := m.cfg.Orch.ThreadsByTime(ctx, orchestrator.Window{Offset: start, Count: page})
		if err != nil {
			return nil, fmt.Errorf("count threads: %w", err)
		}
		ids := orchestrator.IDs(zs)
		statuses, err := m.cfg.Orch.Statuses(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("count threads: %w", err)
		}
		for _, s := range statuses {
			if s != "" {
				out.By[s]++
				out.Total++
			}
		}
		if len(ids) < page {
			break
		}
	}
	m.counts, m.countsTime, m.countsTook = out, time.Now(), time.Since(began)
	return out, nil
}

// Node is a thread in a tree (orchestrator.TreeNode): its children, and
// the thread that continues it. The JSON matches `spool thread tree --json`.
type Node = orchestrator.TreeNode

// budget returns the live budget of rec's subtree, or nil when the thread
// has no ledger entry.
func (m *Monitor) budget(ctx context.Context, rec *spooltype.Record) (*orchestrator.Budget, error) {
	b, err := m.cfg.Orch.ThreadBudget(ctx, rec)
	if errors.Is(err, orchestrator.ErrNoBudget) {
		return nil, nil
	}
	return b, err
}

// ThreadView is everything the thread page shows; /api/threads/ID returns
// it as JSON.
type ThreadView struct {
	Thread *spooltype.Record    `json:"thread"`
	Chain  []*spooltype.Record  `json:"chain"`
	Tree   *Node                `json:"tree"`
	Budget *orchestrator.Budget `json:"budget"`
	// Live: some thread of the tree has not finished.
	Live bool `json:"live"`
}

func (m *Monitor) threadView(ctx context.Context, id string) (*ThreadView, error) {
	rec, err := m.cfg.Orch.Record(ctx, id)
	if err != nil {
		return nil, err
	}
	v := &ThreadView{Thread: rec}
	if v.Chain, err = m.cfg.Orch.ChainRecords(ctx, id); err != nil {
		return nil, err
	}
	if v.Tree, err = m.cfg.Orch.Tree(ctx, rec, m.cfg.MaxTreeNodes); err != nil {
		return nil, err
	}
	if v.Budget, err = m.budget(ctx, rec); err != nil {
		return nil, err
	}
	v.Live = v.Tree.Live()
	return v, nil
}
