package scheduler_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/scheduler"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// turnSpends are the spends of the turns lostTurns records.
var turnSpends = []float64{0.001, 0.002, 0.0035, 0.000125}

// lostTurns runs the registry, transcript and ledger steps of a thread's
// first len(turnSpends) turns as a worker's checkpoints do (commit, then
// the signed segment, then the charge), with Redis losing every write
// after the first turn's: the segments are durable, the commits and
// charges of turns 2 on are gone. It returns the thread's record and the
// transcript's mark and last checkpoint version.
func lostTurns(t *testing.T, e *env, o *orchestrator.Orchestrator) (*registry.Record, transcript.Mark, int64) {
	t.Helper()
	ctx := context.Background()
	rec, err := o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "x"},
		Queue: e.queue, Bundle: e.bundle()})
	require.NoError(t, err)
	id := rec.ThreadID
	claimed := claimDead(t, o, id) // running, no lease: its worker is gone
	v := claimed.Version
	tw, err := transcript.CreateWriter(id, e.store, e.signer)
	require.NoError(t, err)
	for i, spend := range turnSpends {
		turn := i + 1
		durable := turn == 1
		if durable {
			v, err = o.Runtime().Services().Registry.Commit(ctx, id, v, registry.Changes{Transcript: orchestrator.RecordMark(tw.Mark())})
			require.NoError(t, err)
		} else {
			v++ // the commit Redis lost
		}
		_, err = tw.Append(transcript.TypeCognitionOut, transcript.CognitionOut{Content: "turn", Turn: turn, Spend: spend})
		require.NoError(t, err)
		_, err = tw.Checkpoint(ctx, transcript.State{Iteration: turn, Version: v})
		require.NoError(t, err)
		if durable {
			_, err = o.Runtime().Services().Ledger.Charge(ctx, claimed.LedgerID(), claimed.BudgetPath(), orchestrator.ChargeKey(id, turn), spend)
			require.NoError(t, err)
		}
	}
	got, err := o.Record(ctx, id)
	require.NoError(t, err)
	return got, tw.Mark(), v
}

// ownNano is a ledger entry's own spend.
func ownNano(t *testing.T, o *orchestrator.Orchestrator, id string) int64 {
	t.Helper()
	entry, err := o.LedgerEntry(context.Background(), id)
	require.NoError(t, err)
	return entry.OwnNano
}

func sumNano(t *testing.T, spends []float64) int64 {
	t.Helper()
	var n int64
	for _, s := range spends {
		v, err := ledger.ToNano(s)
		require.NoError(t, err)
		n += v
	}
	return n
}

// simulateRestart makes the housekeeping marker name another Redis run,
// as after a restart.
func simulateRestart(t *testing.T, e *env, o *orchestrator.Orchestrator) {
	t.Helper()
	require.NoError(t, e.redis.Client.HSet(context.Background(), o.Runtime().Services().Keys.Housekeeping(), "run_id", "a-run-before-the-crash").Err())
}

// (a) A created thread whose start task is gone (Redis lost the claim
// that took it, and the worker that had taken it acknowledged it) gets a
// new activation task once housekeeping sees that Redis restarted, and
// the task claims it; a created thread whose start task is still queued
// gets none. Without a detected loss (or the periodic pass) nothing is
// looked at.
func TestReconcileRequeuesLostStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := e.orch(nil)
	ctx := context.Background()
	s := e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, ReconcileInterval: -1}, o)
	res, err := s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.TriggerNoMarker, res.Reconcile.Trigger, "the first pass on this Redis")

	start := func() string {
		rec, err := o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "x"},
			Queue: e.queue, Bundle: e.bundle()})
		require.NoError(t, err)
		return rec.ThreadID
	}
	lost, queued := start(), start()
	insp := asynq.NewInspectorFromRedisClient(e.redis.Client)
	require.NoError(t, insp.DeleteTask(e.asynqQueue(), lost))

	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.ReconcileResult{}, res.Reconcile, "steady state: no reconciliation")

	simulateRestart(t, e, o)
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.TriggerRestart, res.Reconcile.Trigger)
	require.Equal(t, 1, res.Reconcile.Requeued)
	acts := pendingActivations(t, insp, e.asynqQueue())
	require.Len(t, acts, 2)
	var requeue queue.Activation
	for _, a := range acts {
		if a.ThreadID == lost {
			requeue = a
		} else {
			require.Equal(t, queue.Activation{ThreadID: queued, Reason: "start"}, a, "the queued start is left alone")
		}
	}
	require.Equal(t, "requeue", requeue.Reason)

	claim, err := o.Runtime().Services().Activations.Claim(ctx, lost, requeue.Reason, requeue.Seq, "token", queue.TaskID(requeue, requeue.Seq), time.Minute)
	require.NoError(t, err, "the requeue task claims the created thread")
	require.Equal(t, thread.StatusRunning, claim.Record.Status)
}

// (b) A thread whose registry and ledger lost the writes of its last
// turns (the transcript holds four durable segments; the registry's mark
// and version and the ledger's charges are those of the first turn) is
// reconciled from its transcript when housekeeping sees the loss: the
// mark rises to the four segments, the version past the last
// checkpoint's, and the ledger's own spend is the sum of the recorded
// turns, to the nano-dollar. A second reconciliation repairs nothing.
func TestReconcileFromTranscript(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := e.orch(nil)
	ctx := context.Background()
	rec, mark, lastVersion := lostTurns(t, e, o)
	id := rec.ThreadID
	require.Equal(t, int64(0), rec.Transcript.Segments, "the registry's mark is the first commit's")
	require.Less(t, rec.Version, lastVersion)
	require.Equal(t, sumNano(t, turnSpends[:1]), ownNano(t, o, rec.LedgerID()))

	s := e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, ReconcileInterval: -1}, o)
	res, err := s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.ReconcileResult{Trigger: scheduler.TriggerNoMarker, Threads: 1, Marks: 1, Versions: 1,
		Charges: len(turnSpends) - 1}, res.Reconcile)

	got, err := o.Record(ctx, id)
	require.NoError(t, err)
	require.Equal(t, registry.TranscriptMark{Segments: mark.Segments, ChainHash: mark.ChainHash}, got.Transcript)
	require.Greater(t, got.Version, lastVersion, "past every version a cut-off activation may hold")
	require.Equal(t, thread.StatusRunning, got.Status, "the status is the recoverer's to move")
	require.Equal(t, sumNano(t, turnSpends), ownNano(t, o, rec.LedgerID()), "the ledger equals the transcript")
	entry, err := o.LedgerEntry(ctx, rec.LedgerID())
	require.NoError(t, err)
	require.Equal(t, entry.OwnNano, entry.ActualNano)

	// The transcript still verifies, held to the new mark.
	_, err = transcript.ReadWith(ctx, e.store, id, e.keyring, transcript.ReadOptions{Marks: []transcript.Mark{orchestrator.RegistryMark(got)}})
	require.NoError(t, err)

	simulateRestart(t, e, o)
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.ReconcileResult{Trigger: scheduler.TriggerRestart, Threads: 1}, res.Reconcile, "nothing left to repair")
	require.Equal(t, sumNano(t, turnSpends), ownNano(t, o, rec.LedgerID()))
}

// (c) What a reconciliation repairs is reported: one structured log line
// per thread (thread_id, what changed) and one per pass, and
// spool_reconciled_total{kind} and spool_reconcile_passes_total{trigger}
// count it. Here the canary counter going backwards (Redis lost writes
// without a restart) is the trigger; the periodic pass runs when due and
// finds nothing.
func TestReconcileReports(t *testing.T) {
	t.Parallel()
	e := setup(t)
	o := e.orch(nil)
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	m := scheduler.NewMetrics(reg)
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := e.scheduler(scheduler.Config{HousekeepingInterval: time.Minute, ReconcileInterval: time.Hour, Metrics: m, Logger: log}, o)
	_, err := s.Housekeep(ctx) // the first pass: no marker
	require.NoError(t, err)
	_, err = s.Housekeep(ctx) // steady state: the canary rises
	require.NoError(t, err)

	rec, _, _ := lostTurns(t, e, o)
	lostStart, err := o.Start(ctx, orchestrator.StartRequest{Directive: "sched/tick", Inputs: map[string]any{"who": "y"},
		Queue: e.queue, Bundle: e.bundle()})
	require.NoError(t, err)
	require.NoError(t, asynq.NewInspectorFromRedisClient(e.redis.Client).DeleteTask(e.asynqQueue(), lostStart.ThreadID))

	// Redis lost its last writes, the marker's canary increments with them.
	require.NoError(t, e.redis.Client.HSet(ctx, o.Runtime().Services().Keys.Housekeeping(), "canary", 1).Err())
	logs.Reset()
	res, err := s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.TriggerCanary, res.Reconcile.Trigger)

	count := func(kind string) float64 { return counter(t, reg, "spool_reconciled_total", "kind", kind) }
	passes := func(trigger string) float64 {
		return counter(t, reg, "spool_reconcile_passes_total", "trigger", trigger)
	}
	require.Equal(t, 1.0, count(scheduler.KindRequeue))
	require.Equal(t, 1.0, count(scheduler.KindMark))
	require.Equal(t, 1.0, count(scheduler.KindVersion))
	require.Equal(t, float64(len(turnSpends)-1), count(scheduler.KindCharge))
	require.Equal(t, 1.0, passes(scheduler.TriggerCanary))
	require.Equal(t, 1.0, passes(scheduler.TriggerNoMarker))

	lines := logLines(t, logs.String())
	thr := findLine(t, lines, "reconciled thread with its transcript")
	require.Equal(t, rec.ThreadID, thr["thread_id"])
	require.Equal(t, float64(len(turnSpends)-1), thr["charges"])
	require.Equal(t, float64(0), thr["transcript_mark_from"])
	require.Equal(t, float64(len(turnSpends)), thr["transcript_mark_to"])
	require.Equal(t, scheduler.TriggerCanary, thr["trigger"])
	require.Equal(t, lostStart.ThreadID, findLine(t, lines, "re-enqueued a created thread whose start task was lost")["thread_id"])
	pass := findLine(t, lines, "reconciled threads with their transcripts")
	require.Equal(t, "WARN", pass["level"])
	require.Equal(t, float64(len(turnSpends)-1), pass["charges"])
	require.Equal(t, float64(1), pass["requeued"])

	// Steady state again: nothing runs, nothing counts.
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.ReconcileResult{}, res.Reconcile)
	// The periodic pass, once due, examines every non-terminal thread
	// (both threads are now running or requeued) and repairs nothing.
	require.NoError(t, e.redis.Client.HSet(ctx, o.Runtime().Services().Keys.Housekeeping(), "periodic_at", time.Now().Add(-2*time.Hour).Format(time.RFC3339Nano)).Err())
	res, err = s.Housekeep(ctx)
	require.NoError(t, err)
	require.Equal(t, scheduler.TriggerPeriodic, res.Reconcile.Trigger)
	require.Zero(t, res.Reconcile.Repairs(), "%+v", res.Reconcile)
	require.Equal(t, 1.0, passes(scheduler.TriggerPeriodic))
	require.Equal(t, float64(len(turnSpends)-1), count(scheduler.KindCharge))
}

func logLines(t *testing.T, s string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

func findLine(t *testing.T, lines []map[string]any, msg string) map[string]any {
	t.Helper()
	for _, l := range lines {
		if l["msg"] == msg {
			return l
		}
	}
	t.Fatalf("no log line %q in %v", msg, lines)
	return nil
}

// counter is the value of a counter series of reg with one label.
func counter(t *testing.T, reg *prometheus.Registry, name, label, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
