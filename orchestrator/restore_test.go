package orchestrator

import (
	"context"
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/keyspace"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// runLost starts req's thread, claims it for a worker that then dies
// (its lease dropped), and runs turns of it as a worker does: per turn
// the commit, the signed segment (thread_started first), the charge; with
// view, the start's thread.json after the first turn. It returns the
// record as claimed, the version held and the transcript's writer.
func runLost(t *testing.T, o *Orchestrator, req StartRequest, spends []float64, view bool) (*registry.Record, int64, *transcript.Writer) {
	t.Helper()
	ctx := context.Background()
	rec, err := o.Start(ctx, req)
	require.NoError(t, err)
	id := rec.ThreadID
	c, err := o.acts.Claim(ctx, id, "start", 0, "dead", id, time.Minute)
	require.NoError(t, err)
	require.NoError(t, o.rdb.Del(ctx, o.keys.Lease(id)).Err())
	rec = c.Record
	w, err := transcript.CreateWriter(id, o.store, o.signer)
	require.NoError(t, err)
	inputs, err := json.Marshal(rec.Inputs)
	require.NoError(t, err)
	_, err = w.Append(transcript.TypeThreadStarted, transcript.ThreadStarted{Directive: rec.Directive, Model: rec.Model,
		ParentID: rec.ParentID, PreviousThreadID: rec.PreviousThreadID, Inputs: inputs, Limits: &rec.Limits,
		Capabilities: rec.Capabilities, BundleDigest: rec.Bundle})
	require.NoError(t, err)
	v := rec.Version
	var cost thread.Cost
	for i, spend := range spends {
		turn := i + 1
		v, err = o.reg.Commit(ctx, id, v, registry.Changes{Transcript: RecordMark(w.Mark())})
		require.NoError(t, err)
		_, err = w.Append(transcript.TypeCognitionOut, transcript.CognitionOut{Content: "turn", Turn: turn, Spend: spend})
		require.NoError(t, err)
		cost.Turns, cost.Spend = turn, cost.Spend+spend
		_, err = w.Checkpoint(ctx, transcript.State{Iteration: turn, Version: v, Cost: cost})
		require.NoError(t, err)
		_, err = o.ledger.Charge(ctx, rec.LedgerID(), rec.BudgetPath(), ChargeKey(id, turn), spend)
		require.NoError(t, err)
		if turn == 1 && view {
			require.NoError(t, o.WriteThreadJSON(ctx, rec))
		}
	}
	return rec, v, w
}

// lostRoot is a root thread claimed by a worker that died, and a snapshot
// of Redis taken right after: what Redis will hold once it loses every
// write since.
func lostRoot(t *testing.T, o *Orchestrator, r *testenv.Redis, digest string) (*registry.Record, *testenv.Snapshot) {
	t.Helper()
	root, _, _ := runLost(t, o, StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Lyon"}, Bundle: digest}, nil, false)
	return root, r.Snapshot(t)
}

func nano(t *testing.T, spends ...float64) int64 {
	t.Helper()
	var n int64
	for _, s := range spends {
		v, err := ledger.ToNano(s)
		require.NoError(t, err)
		n += v
	}
	return n
}

// TestRestoreAdoptsALostPlannedChild: a planned child registered, ran and
// finished, and Redis lost all of it (a failover short of its last
// writes). A rerun of the spawn (its turn ran again) adopts the child
// restored from the store, as it ended, instead of starting a twin under
// the same id whose first checkpoint would find a transcript there; its
// ledger entry and every ancestor's hold its recorded turns, once; on
// each Redis topology (standalone, a sharded Cluster, Sentinel).
func TestRestoreAdoptsALostPlannedChild(t *testing.T) {
	t.Parallel()
	for _, top := range testenv.Topologies {
		t.Run(string(top), func(t *testing.T) {
			t.Parallel()
			o, r, digest := restoreSetup(t, top)
			testRestoreAdoptsALostPlannedChild(t, o, r, digest)
		})
	}
}

// restoreSetup is startSetup on a Redis of topology top, with the
// namespace's keys sharded by tree on a Cluster (registry.Layout), so
// that restore.lua's keys must all be one tree's slot.
func restoreSetup(t *testing.T, top testenv.Topology) (*Orchestrator, *testenv.Redis, string) {
	t.Helper()
	r := testenv.NewRedisOn(t, top)
	store := blobstore.NewMemory()
	digest := leadsBundle(t, store)
	signer, err := transcript.GenerateKey()
	require.NoError(t, err)
	ks, err := registry.Layout(t.Context(), r.Universal, keyspace.New(r.Namespace), registry.DefaultShards(r.Universal), false)
	require.NoError(t, err)
	client := asynq.NewClientFromRedisClient(r.Universal)
	t.Cleanup(func() { _ = client.Close() })
	o, err := New(Config{Namespace: r.Namespace, Shards: ks.Shards(), Logger: slog.New(slog.DiscardHandler)}, r.Universal, store,
		&queue.Enqueuer{Client: client}, signer, transcript.NewKeyring(signer.PublicKey()))
	require.NoError(t, err)
	return o, r, digest
}

func testRestoreAdoptsALostPlannedChild(t *testing.T, o *Orchestrator, r *testenv.Redis, digest string) {
	ctx := t.Context()
	root, snap := lostRoot(t, o, r, digest)
	spends := []float64{0.01, 0.02}
	req := StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Lyon"}, ParentID: root.ThreadID,
		ID: o.Runtime().PlannedID(IDRequest{Directive: "test/leads", ParentID: root.ThreadID}, root.StartedAt, "turn/1/call/0"), Planned: true}
	kid, v, w := runLost(t, o, req, spends, true)
	cur, err := o.reg.Get(ctx, kid.ThreadID)
	require.NoError(t, err)
	require.NoError(t, o.Runtime().Finalize(ctx, cur, v, Outcome{Status: thread.StatusCompleted, Result: "42 leads",
		Cost: thread.Cost{Turns: 2, Spend: 0.03}, Transcript: new(w.Mark())}))

	snap.Rollback(t)
	_, err = o.reg.Get(ctx, kid.ThreadID)
	require.ErrorIs(t, err, registry.ErrNotFound)

	again, err := o.Start(ctx, req)
	require.NoError(t, err)
	require.Equal(t, kid.ThreadID, again.ThreadID)
	require.Equal(t, thread.StatusCompleted, again.Status, "adopted as it ended, not started again")
	require.Equal(t, "42 leads", again.Result)
	require.NotEmpty(t, again.Extra[registry.RestoredField])
	got, err := o.reg.Get(ctx, kid.ThreadID)
	require.NoError(t, err)
	require.Equal(t, again.Version, got.Version)
	require.Equal(t, []string{root.ThreadID}, got.Ancestors)
	require.Equal(t, []string{root.ThreadID}, got.LedgerPath)
	kids, err := o.reg.ListChildren(ctx, root.ThreadID)
	require.NoError(t, err)
	require.Len(t, kids, 1)

	e, err := o.ledger.Get(ctx, kid.ThreadID)
	require.NoError(t, err)
	require.Equal(t, nano(t, spends...), e.OwnNano)
	require.Equal(t, string(thread.StatusCompleted), e.Status)
	e, err = o.ledger.Get(ctx, root.ThreadID)
	require.NoError(t, err)
	require.Equal(t, nano(t, spends...), e.ActualNano, "the root's entry has the child's spend back")

	// A verifier finds it whole, and a second start adopts the same.
	_, err = o.VerifyThread(ctx, kid.ThreadID, transcript.Strict)
	require.NoError(t, err)
	third, err := o.Start(ctx, req)
	require.NoError(t, err)
	require.Equal(t, again.Version, third.Version)
	e, err = o.ledger.Get(ctx, root.ThreadID)
	require.NoError(t, err)
	require.Equal(t, nano(t, spends...), e.ActualNano, "charged once")
}

// TestRestoreChain: a child handed off to a continuation, which ran a
// turn and wrote no thread.json (its worker died first), and Redis lost
// both. Restore gives back the chain: the child as it ended (continued,
// its thread.json), the continuation running from its last checkpoint,
// its record rebuilt from its thread_started and its parent's record, a
// recover task queued for it; the chain's one ledger entry holds both
// threads' turns and stays open. A thread that left no segment is
// ErrNotDurable.
func TestRestoreChain(t *testing.T) {
	t.Parallel()
	o, r, digest := startSetup(t)
	ctx := t.Context()
	root, snap := lostRoot(t, o, r, digest)
	kidReq := StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Lyon"}, ParentID: root.ThreadID}
	kid, v, w := runLost(t, o, kidReq, []float64{0.01}, true)
	cont, err := o.Start(ctx, StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Lyon"}, ParentID: root.ThreadID,
		PreviousThreadID: kid.ThreadID, Kind: KindHandoff})
	require.NoError(t, err)
	cur, err := o.reg.Get(ctx, kid.ThreadID)
	require.NoError(t, err)
	require.NoError(t, o.Runtime().Finalize(ctx, cur, v, Outcome{Status: thread.StatusContinued, ContinuationID: cont.ThreadID,
		Cost: thread.Cost{Turns: 1, Spend: 0.01}, Transcript: new(w.Mark())}))
	c, err := o.acts.Claim(ctx, cont.ThreadID, "start", 0, "dead", cont.ThreadID, time.Minute)
	require.NoError(t, err)
	cw, err := transcript.CreateWriter(cont.ThreadID, o.store, o.signer)
	require.NoError(t, err)
	_, err = cw.Append(transcript.TypeThreadStarted, transcript.ThreadStarted{Directive: "test/leads", ParentID: root.ThreadID,
		PreviousThreadID: kid.ThreadID, Limits: &c.Record.Limits, BundleDigest: c.Record.Bundle, Capabilities: c.Record.Capabilities})
	require.NoError(t, err)
	_, err = cw.Append(transcript.TypeCognitionOut, transcript.CognitionOut{Content: "turn", Turn: 1, Spend: 0.005})
	require.NoError(t, err)
	_, err = cw.Checkpoint(ctx, transcript.State{Iteration: 1, Version: c.Version + 1, Cost: thread.Cost{Turns: 1, Spend: 0.005}})
	require.NoError(t, err)

	snap.Rollback(t)
	rs, err := o.Housekeeper().Restore(ctx, kid.ThreadID, root.ThreadID)
	require.NoError(t, err)
	require.Len(t, rs.Threads, 2)
	require.Equal(t, 2, rs.Charges)
	require.Equal(t, thread.StatusContinued, rs.Record.Status)
	require.Equal(t, cont.ThreadID, rs.Record.ContinuationThreadID)
	end, err := o.reg.ResolveChain(ctx, kid.ThreadID)
	require.NoError(t, err)
	require.Equal(t, cont.ThreadID, end)

	got, err := o.reg.Get(ctx, cont.ThreadID)
	require.NoError(t, err)
	require.Equal(t, thread.StatusRunning, got.Status)
	require.Equal(t, kid.ThreadID, got.ContinuationOf)
	require.Equal(t, kid.ThreadID, got.ChainRootID)
	require.Equal(t, 1, got.ChainIndex)
	require.Equal(t, root.ThreadID, got.ParentID)
	require.Equal(t, []string{root.ThreadID}, got.LedgerPath)
	require.Equal(t, root.Queue, got.Queue)
	require.Equal(t, c.Version+1+VersionFence, got.Version)
	insp := asynq.NewInspectorFromRedisClient(r.Client)
	t.Cleanup(func() { _ = insp.Close() })
	_, err = insp.GetTaskInfo(o.keys.QueueOf(got.Queue, got.ThreadID),
		queue.TaskID(queue.Activation{ThreadID: got.ThreadID, Reason: "recover"}, got.Version))
	require.NoError(t, err, "a recover task takes it up")

	e, err := o.ledger.Get(ctx, kid.ThreadID)
	require.NoError(t, err)
	require.Equal(t, nano(t, 0.01, 0.005), e.OwnNano, "the chain's entry: both threads' turns")
	require.Equal(t, ledger.StatusActive, e.Status, "the chain goes on")
	e, err = o.ledger.Get(ctx, root.ThreadID)
	require.NoError(t, err)
	require.Equal(t, nano(t, 0.01, 0.005), e.ActualNano)

	// Restoring again changes nothing; a thread with nothing durable is
	// not restored.
	again, err := o.Housekeeper().Restore(ctx, kid.ThreadID, root.ThreadID)
	require.NoError(t, err)
	require.Empty(t, again.Threads)
	_, err = o.Housekeeper().Restore(ctx, "test/leads-1795000000-nothingdur", root.ThreadID)
	require.ErrorIs(t, err, ErrNotDurable)
}
