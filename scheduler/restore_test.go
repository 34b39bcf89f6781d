package scheduler_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// runChild starts a child of parent and runs turns of it as a worker
// does (commit, the signed segment, the charge; the start's thread.json
// after the first), each turn spending spends[i]; finished, it ends
// completed (Finalize: the final thread.json, the ledger released). It
// returns the child's id.
func runChild(t *testing.T, e *env, o *orchestrator.Orchestrator, parent string, spends []float64, finished bool) string {
	t.Helper()
	ctx := context.Background()
	rec, err := o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "kid"},
		ParentID: parent, Queue: e.queue})
	require.NoError(t, err)
	id := rec.ThreadID
	claimed := claimDead(t, o, id)
	v := claimed.Version
	tw, err := transcript.CreateWriter(id, e.store, e.signer)
	require.NoError(t, err)
	inputs, err := json.Marshal(claimed.Inputs)
	require.NoError(t, err)
	_, err = tw.Append(transcript.TypeThreadStarted, transcript.ThreadStarted{Directive: claimed.Directive, Model: claimed.Model,
		ParentID: parent, Inputs: inputs, Limits: &claimed.Limits, Capabilities: claimed.Capabilities, BundleDigest: claimed.Bundle})
	require.NoError(t, err)
	var cost thread.Cost
	for i, spend := range spends {
		turn := i + 1
		v, err = o.Runtime().Services().Registry.Commit(ctx, id, v, registry.Changes{Transcript: orchestrator.RecordMark(tw.Mark())})
		require.NoError(t, err)
		_, err = tw.Append(transcript.TypeCognitionOut, transcript.CognitionOut{Content: "turn", Turn: turn, Spend: spend})
		require.NoError(t, err)
		cost.Turns, cost.Spend = turn, cost.Spend+spend
		_, err = tw.Checkpoint(ctx, transcript.State{Iteration: turn, Version: v, Cost: cost})
		require.NoError(t, err)
		_, err = o.Runtime().Services().Ledger.Charge(ctx, claimed.LedgerID(), claimed.BudgetPath(), orchestrator.ChargeKey(id, turn), spend)
		require.NoError(t, err)
		if turn == 1 {
			require.NoError(t, o.WriteThreadJSON(ctx, claimed)) // the start's view
		}
	}
	if finished {
		cur, err := o.Record(ctx, id)
		require.NoError(t, err)
		mark := tw.Mark()
		require.NoError(t, o.Runtime().Finalize(ctx, cur, v, orchestrator.Outcome{Status: thread.StatusCompleted, Result: "kid done",
			Cost: cost, Transcript: &mark}))
	}
	return id
}

// (d) Redis loses every write since a parent's turn began (a failover to
// a replica that had not received them): the two children the turn
// started are gone from the registry and the ledger (their charges from
// the parent's entry too), one of them finished, the other mid-run. Their
// signed transcripts and thread.json are in the store, and the parent's
// transcript names them (child_spawned). Housekeeping, seeing the loss
// (the canary went back), restores both from the store: the finished one
// as it ended, the other running from its last checkpoint with a recover
// task; and charges every turn they recorded, once, along the whole path.
// A second pass finds nothing more to restore.
func TestReconcileRestoresLostChildren(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := e.orch(nil)
	ctx := context.Background()
	s := e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, ReconcileInterval: -1}, o)
	_, err := s.Housekeep(ctx)
	require.NoError(t, err)

	root, err := o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "x"},
		Queue: e.queue, Bundle: e.bundle()})
	require.NoError(t, err)
	parent := claimDead(t, o, root.ThreadID)
	snap := e.redis.Snapshot(t) // what the new master will hold

	doneSpends, runningSpends := []float64{0.004, 0.0025}, []float64{0.0015}
	done := runChild(t, e, o, parent.ThreadID, doneSpends, true)
	running := runChild(t, e, o, parent.ThreadID, runningSpends, false)
	tw, err := transcript.CreateWriter(parent.ThreadID, e.store, e.signer)
	require.NoError(t, err)
	for _, kid := range []string{done, running} {
		_, err = tw.Append(transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: kid, Directive: "sched/tick", Async: true})
		require.NoError(t, err)
	}
	_, err = tw.Checkpoint(ctx, transcript.State{Iteration: 1, Version: parent.Version})
	require.NoError(t, err)
	res, err := s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.ReconcileResult{}, res.Reconcile, "nothing lost yet")

	snap.Rollback(t)
	for _, kid := range []string{done, running} {
		_, err := o.Record(ctx, kid)
		require.ErrorIs(t, err, registry.ErrNotFound)
	}
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.TriggerCanary, res.Reconcile.Trigger)
	require.Equal(t, 2, res.Reconcile.Restored)
	require.Equal(t, len(doneSpends)+len(runningSpends), res.Reconcile.Charges)
	require.Zero(t, res.Reconcile.Skipped)

	got, err := o.Record(ctx, done)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCompleted, got.Status)
	require.Equal(t, "kid done", got.Result)
	require.Equal(t, parent.ThreadID, got.ParentID)
	require.Equal(t, []string{parent.ThreadID}, got.Ancestors)
	require.NotEmpty(t, got.Extra[registry.RestoredField])
	entry, err := o.LedgerEntry(ctx, done)
	require.NoError(t, err)
	require.Equal(t, sumNano(t, doneSpends), entry.OwnNano)
	require.Equal(t, string(thread.StatusCompleted), entry.Status)
	// It verifies as any finished thread does, against its thread.json.
	_, err = o.VerifyThread(ctx, done, transcript.Strict)
	require.NoError(t, err)

	got, err = o.Record(ctx, running)
	require.NoError(t, err)
	require.Equal(t, thread.StatusRunning, got.Status, "from its last checkpoint on, its worker's")
	require.GreaterOrEqual(t, got.Version, int64(orchestrator.VersionFence))
	require.Equal(t, int64(len(runningSpends)), got.Transcript.Segments)
	require.Equal(t, sumNano(t, runningSpends), ownNano(t, o, running))
	insp := asynq.NewInspectorFromRedisClient(e.redis.Client)
	require.Contains(t, pendingActivations(t, insp, e.asynqQueue()), queue.Activation{ThreadID: running, Reason: "recover", Seq: got.Version})
	claim, err := o.Runtime().Services().Activations.Claim(ctx, running, "recover", got.Version, "token", "task", time.Minute)
	require.NoError(t, err, "the recover task claims it")
	require.Equal(t, int64(len(runningSpends)), claim.Record.Transcript.Segments)

	kids, err := o.Children(ctx, parent.ThreadID)
	require.NoError(t, err)
	require.Len(t, kids, 2)
	entry, err = o.LedgerEntry(ctx, parent.ThreadID)
	require.NoError(t, err)
	require.Equal(t, sumNano(t, doneSpends)+sumNano(t, runningSpends), entry.ActualNano, "the path has the children's spend back")

	simulateRestart(t, e, o)
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Zero(t, res.Reconcile.Restored)
	require.Zero(t, res.Reconcile.Charges)
}
