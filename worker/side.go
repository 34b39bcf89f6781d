package worker

import (
	"context"
	"log/slog"
	"sync"
)

// sideWrites runs best-effort writes of views (renders, metadata copies)
// beside an activation's critical path, which is only the checkpoint:
// registry fence, segment, charge. Wait returns when all have finished; an
// activation waits before it returns, so no write outlives it.
type sideWrites struct {
	wg sync.WaitGroup
}

// Go runs f in the background, logging its failure.
func (w *sideWrites) Go(ctx context.Context, log *slog.Logger, what string, f func(context.Context) error) {
	w.wg.Add(1)
	ctx = context.WithoutCancel(ctx)
	go func() {
		defer w.wg.Done()
		if err := f(ctx); err != nil {
			log.Warn(what+" not written", "error", err)
		}
	}()
}

// Wait waits for every write started so far.
func (w *sideWrites) Wait() { w.wg.Wait() }
