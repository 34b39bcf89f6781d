package scheduler_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/thread"
)

// TestFireTenantAndPriority: an entry's tenant and priority are its
// runs': the tick's run is acme's at priority 2, and carries the tick's
// idempotency key beside the tick's id, which names that run for acme as
// any start's key does (a start with it and the same request answers
// the tick's run); an entry without them runs for the default tenant at
// its default priority, keyed the same way.
func TestFireTenantAndPriority(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	o := e.orch(nil)
	entries := e.entries(fmt.Sprintf(`schedules:
  - {id: acme-tick, directive: sched/tick, cron: '@every 1s', queue: %s, inputs: {who: acme}, tenant: acme, priority: 2, tags: {team: acme-ops}}
  - {id: plain, directive: sched/tick, cron: '@every 1s', queue: %s, inputs: {who: plain}}
`, e.queue, e.queue))
	require.Equal(t, "acme", entries[0].Tenant)
	require.Equal(t, 2, entries[0].Priority)
	s := e.scheduler(scheduler.Config{Entries: entries}, o)
	tick := scheduler.Every(time.Second).Next(time.Now())

	res, err := s.Fire(ctx, "acme-tick", tick)
	require.NoError(t, err)
	require.Equal(t, scheduler.OutcomeStarted, res.Outcome)
	require.Equal(t, scheduler.TickThreadID("sched/tick", "acme-tick", tick), res.ThreadID)
	rec, err := o.Record(ctx, res.ThreadID)
	require.NoError(t, err)
	require.Equal(t, "acme", rec.Tenant)
	require.Equal(t, 2, rec.Priority)
	require.Equal(t, map[string]string{"team": "acme-ops"}, rec.Tags, "the entry's tags")
	key := "schedule:acme-tick:" + tick.UTC().Format(time.RFC3339)
	require.Equal(t, key, rec.IdempotencyKey)
	require.Equal(t, key, scheduler.TickIdempotencyKey("acme-tick", tick))

	again, err := o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "acme"},
		Queue: e.queue, Bundle: e.bundle(), Tenant: "acme", Priority: 2, IdempotencyKey: key})
	require.NoError(t, err)
	require.True(t, *again.Existing)
	require.Equal(t, res.ThreadID, again.ThreadID, "the key names the tick's run")
	_, err = o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "someone else"},
		Queue: e.queue, Bundle: e.bundle(), Tenant: "acme", Priority: 2, IdempotencyKey: key})
	require.ErrorIs(t, err, &thread.AdmissionError{Code: thread.CodeIdempotencyKeyReused})

	res, err = s.Fire(ctx, "plain", tick)
	require.NoError(t, err)
	require.Equal(t, scheduler.OutcomeStarted, res.Outcome)
	rec, err = o.Record(ctx, res.ThreadID)
	require.NoError(t, err)
	require.Equal(t, thread.DefaultTenant, rec.Tenant)
	require.Equal(t, thread.DefaultPriority, rec.Priority)
	require.Equal(t, scheduler.TickIdempotencyKey("plain", tick), rec.IdempotencyKey)
	require.Len(t, e.threads(o, "sched/tick"), 2)
}
