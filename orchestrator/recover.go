package orchestrator

import (
	"context"

	"github.com/spool-run/spool/queue"
)

// Recover runs one housekeeping pass: orphans (running threads whose lease
// lapsed) and stalled wake-ups (waiting threads whose wake-up was lost)
// are re-enqueued, and activations admission parked whose request its
// tenant's state lost are requested again (counted with the wake-ups),
// root chains counted in flight whose end was lost are ended, and the
// allowances of reaped activations whose use is known are settled.
// Every worker's recoverer and the scheduler's housekeeping call it; it
// reports how many of each it found. A
// recovery's task id names the version (a wake-up's, the suspension) it
// is for, so every process's recoverer enqueues it once; should Redis
// have lost writes, that task may have finished while the claim it made
// was lost, and Reenqueue enqueues it again.
func (h *Housekeeper) Recover(ctx context.Context) (orphans, wakes int, err error) {
	found, err := h.acts.Orphans(ctx)
	if err != nil {
		return 0, 0, err
	}
	for _, or := range found {
		h.log.Info("recovering orphaned thread", "thread_id", or.ThreadID, "version", or.Version)
		if _, err := h.Reenqueue(ctx, queue.Activation{ThreadID: or.ThreadID, Reason: "recover"}, or.Version, or.Queue); err != nil {
			return len(found), 0, err
		}
	}
	stalled, err := h.acts.StalledWaits(ctx)
	if err != nil {
		return len(found), 0, err
	}
	for _, s := range stalled {
		if err := h.enqueueWake(ctx, s); err != nil {
			return len(found), len(stalled), err
		}
	}
	readmitted, err := h.readmitParked(ctx)
	if err != nil {
		return len(found), len(stalled) + readmitted, err
	}
	if _, err = h.endLostChains(ctx); err != nil {
		return len(found), len(stalled) + readmitted, err
	}
	_, err = h.settleLapsed(ctx)
	return len(found), len(stalled) + readmitted, err
}
