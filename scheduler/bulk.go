package scheduler

import (
	"context"
	"sync"
	"time"
)

// bulkEvery is how often a scheduler process looks for bulk operations
// whose runner died (orchestrator.OrphanedBulks): with the runner's
// 15 s lease, an operation goes on within about 20 s of its runner's
// death.
const bulkEvery = 5 * time.Second

// runBulks adopts the bulk operations whose runner died and runs each to
// its end, one goroutine each, until ctx ends. Any number of scheduler
// processes may do so: one claim wins (bulk_claim.lua), and an operation
// two runners act on for a moment is still counted once per run.
func (s *Scheduler) runBulks(ctx context.Context) {
	t := time.NewTicker(bulkEvery)
	defer t.Stop()
	var (
		mu      sync.Mutex
		running = map[string]bool{}
		wg      sync.WaitGroup
	)
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ids, err := s.o.OrphanedBulks(ctx)
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("bulk operations: look for orphans", "error", err)
			}
			continue
		}
		for _, id := range ids {
			mu.Lock()
			busy := running[id]
			running[id] = true
			mu.Unlock()
			if busy {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { mu.Lock(); delete(running, id); mu.Unlock() }()
				op, err := s.o.RunBulk(ctx, id, "scheduler:"+s.token, nil)
				switch {
				case err != nil && ctx.Err() == nil:
					s.log.Error("bulk operation", "operation", id, "error", err)
				case err == nil:
					s.log.Info("bulk operation run", "operation", id, "status", op.Status, "done", op.Done, "failed", op.Failed)
				}
			}()
		}
	}
}
