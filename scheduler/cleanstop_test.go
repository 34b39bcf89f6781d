package scheduler_test

import (
	"bytes"
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/scheduler"
)

// TestCleanRestart: a Redis that restarts (a new run_id) after the
// process that ran it sealed its marker and stopped it cleanly lost
// nothing when the sealed marker is there: no reconciliation and no
// warning, and the marker then names the new run. One that lost writes
// since the seal (its canary behind it) or its whole data (no marker)
// is a loss, reconciled with a warning, as a restart without a seal is.
func TestCleanRestart(t *testing.T) {
	t.Parallel()
	const before = "the-run-the-seal-was-made-in"
	// sealed runs a pass and seals, as spool dev does when it stops,
	// then makes the marker name the run before the restart, as a
	// restarted Redis's does; it returns the seal.
	sealed := func(t *testing.T, e *env, s *scheduler.Scheduler) *scheduler.CleanStop {
		ctx := context.Background()
		_, err := s.Housekeep(ctx)
		require.NoError(t, err)
		cs, err := s.Seal(ctx)
		require.NoError(t, err)
		require.Positive(t, cs.Canary)
		require.NotEmpty(t, cs.RunID)
		cs.RunID = before
		require.NoError(t, e.redis.Client.HSet(ctx, e.orch(nil).Runtime().Services().Keys.Housekeeping(), "run_id", before).Err())
		return &cs
	}
	restart := func(t *testing.T, e *env, cs *scheduler.CleanStop) (scheduler.ReconcileResult, []map[string]any) {
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		s := e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, ReconcileInterval: -1, CleanStop: cs, Logger: log}, e.orch(nil))
		res, err := s.Housekeep(context.Background())
		require.NoError(t, err)
		return res.Reconcile, logLines(t, logs.String())
	}
	warned := func(lines []map[string]any) []any {
		var out []any
		for _, l := range lines {
			if l["level"] == "WARN" {
				out = append(out, l["msg"])
			}
		}
		return out
	}

	t.Run("every write kept", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		o := e.orch(nil)
		cs := sealed(t, e, e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, ReconcileInterval: -1}, o))
		res, lines := restart(t, e, cs)
		require.Equal(t, scheduler.ReconcileResult{}, res, "nothing to reconcile")
		require.Empty(t, warned(lines))
		findLine(t, lines, "redis restarted after a clean stop, with every write it had: nothing to reconcile")
		runID, err := e.redis.Client.HGet(context.Background(), o.Runtime().Services().Keys.Housekeeping(), "run_id").Result()
		require.NoError(t, err)
		require.NotEqual(t, before, runID, "the marker names the new run")

		// Without the seal, the same restart warns.
		require.NoError(t, e.redis.Client.HSet(context.Background(), o.Runtime().Services().Keys.Housekeeping(), "run_id", before).Err())
		res, lines = restart(t, e, nil)
		require.Equal(t, scheduler.TriggerRestart, res.Trigger)
		require.Contains(t, warned(lines), "redis may have lost writes: reconciling threads with their transcripts")
	})

	t.Run("writes lost since the seal", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		o := e.orch(nil)
		cs := sealed(t, e, e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, ReconcileInterval: -1}, o))
		require.NoError(t, e.redis.Client.HSet(context.Background(), o.Runtime().Services().Keys.Housekeeping(), "canary", cs.Canary-1).Err())
		res, lines := restart(t, e, cs)
		require.Equal(t, scheduler.TriggerRestart, res.Trigger)
		require.Contains(t, warned(lines), "redis may have lost writes: reconciling threads with their transcripts")
	})

	t.Run("the data lost", func(t *testing.T) {
		t.Parallel()
		e := setup(t)
		o := e.orch(nil)
		cs := sealed(t, e, e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, ReconcileInterval: -1}, o))
		require.NoError(t, e.redis.Client.Del(context.Background(), o.Runtime().Services().Keys.Housekeeping()).Err())
		res, lines := restart(t, e, cs)
		require.Equal(t, scheduler.TriggerNoMarker, res.Trigger)
		require.Contains(t, warned(lines), "redis lost its data since its clean stop (the housekeeping marker is gone): reconciling threads with their transcripts")
	})
}
