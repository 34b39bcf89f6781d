package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/spool-run/spool/queue"
)

// TypePump is the asynq task type of a scheduled pump (9.3): an
// activation parked on a ceiling that has room again at a known time
// (tenant_rate: the next start the rate allows; tenant_budget: the next
// window) is granted then by a worker pumping its tenant, not only at the
// balancer's next pass (the backstop of a pump that is lost).
const TypePump = "spool:admission:pump"

// minPumpDelay is the shortest delay of a scheduled pump.
const minPumpDelay = 100 * time.Millisecond

// pumpTask is a TypePump task's payload.
type pumpTask struct {
	Tenant string `json:"tenant"`
}

// SchedulePump schedules a pump of tenant at at. Its task id is
// pump:<tenant>:<unix ms>, so the parks of one call, or of calls that
// found the same next room, schedule one task.
func (a *Admitter) SchedulePump(ctx context.Context, tenant string, at time.Time) error {
	if a.enq == nil || a.enq.Client == nil {
		return nil
	}
	body, err := json.Marshal(pumpTask{Tenant: tenant})
	if err != nil {
		return err
	}
	// After the delay the fleet clock gives (asynq schedules by the
	// process's own), and never at once: a pump that ran a moment early
	// asks for the same time again.
	in := max(at.Sub(a.now()), minPumpDelay)
	t := asynq.NewTask(TypePump, body, asynq.TaskID(fmt.Sprintf("pump:%s:%d", tenant, at.UnixMilli())), asynq.ProcessIn(in),
		asynq.Queue(a.ks.QueueOf(queue.DefaultQueue, tenant)), asynq.MaxRetry(3))
	_, err = a.enq.Client.EnqueueContext(context.WithoutCancel(ctx), t)
	if err == nil || errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		return nil
	}
	return fmt.Errorf("schedule a pump of tenant %s: %w", tenant, err)
}

// HandlePump runs a TypePump task: the tenant is pumped (Pump), its
// waiters with room granted and enqueued; a ceiling still without room
// schedules the next pump itself.
func (a *Admitter) HandlePump(ctx context.Context, t *asynq.Task) error {
	var p pumpTask
	if err := json.Unmarshal(t.Payload(), &p); err != nil || p.Tenant == "" {
		return fmt.Errorf("admission pump payload %q: %w", t.Payload(), asynq.SkipRetry)
	}
	if a.Policy() == nil {
		return nil
	}
	_, err := a.Pump(ctx, p.Tenant, PumpArgs{})
	return err
}
