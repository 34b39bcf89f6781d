package orchestrator

import (
	"fmt"
	"log/slog"
	"net"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// startSetup is an orchestrator on a fresh Redis and a memory store that
// holds a bundle with one directive, test/leads (projectTestDirective),
// whose digest it returns.
func startSetup(tb testing.TB) (*Orchestrator, *testenv.Redis, string) {
	tb.Helper()
	r := testenv.NewRedis(tb)
	store := blobstore.NewMemory()
	digest := leadsBundle(tb, store)
	signer, err := transcript.GenerateKey()
	require.NoError(tb, err)
	client := asynq.NewClientFromRedisClient(r.Client)
	tb.Cleanup(func() { _ = client.Close() })
	o, err := New(Config{Namespace: r.Namespace, Logger: slog.New(slog.DiscardHandler)}, r.Client, store,
		&queue.Enqueuer{Client: client}, signer, transcript.NewKeyring(signer.PublicKey()))
	require.NoError(tb, err)
	return o, r, digest
}

// TestStartInOneScript: a start's budget and record are one script
// (start.lua): the record only once the budget is there, and each
// refusal is its own package's error.
func TestStartInOneScript(t *testing.T) {
	t.Parallel()
	o, _, digest := startSetup(t)
	ctx := t.Context()
	inputs := map[string]any{"city": "Lyon"}
	req := func(parent string) StartRequest {
		return StartRequest{Directive: "test/leads", Inputs: inputs, Bundle: digest, ParentID: parent}
	}

	// A root registers its entry with its spend limit as the ceiling.
	root, err := o.Start(ctx, req(""))
	require.NoError(t, err)
	e, err := o.ledger.Get(ctx, root.ThreadID)
	require.NoError(t, err)
	require.InDelta(t, 0.1, e.Max, 1e-12)
	require.Empty(t, e.ParentID)
	require.Empty(t, root.LedgerPath)

	// A child is admitted under it: an entry whose parent is the root's.
	kid, err := o.Start(ctx, req(root.ThreadID))
	require.NoError(t, err)
	require.Equal(t, []string{root.ThreadID}, kid.LedgerPath)
	require.Equal(t, []string{root.ThreadID}, kid.Ancestors)
	e, err = o.ledger.Get(ctx, kid.ThreadID)
	require.NoError(t, err)
	require.Equal(t, root.ThreadID, e.ParentID)
	got, err := o.reg.Get(ctx, kid.ThreadID)
	require.NoError(t, err)
	require.Equal(t, kid.Version, got.Version)
	require.Equal(t, kid.ChainRootID, got.ChainRootID)

	// An id that is registered already is the registry's refusal, after
	// the budget, and the spawn is given back.
	spawns := func() int {
		n, _ := o.rdb.Get(ctx, o.keys.Spawns(root.ThreadID)).Int()
		return n
	}
	before := spawns()
	dup := req(root.ThreadID)
	dup.ID = kid.ThreadID
	_, err = o.Start(ctx, dup)
	require.ErrorIs(t, err, registry.ErrExists)
	require.Equal(t, before, spawns())

	// A guarantee that does not fit is the ledger's refusal: nothing is
	// registered, and the spawn is given back.
	guaranteed := req(root.ThreadID)
	guaranteed.Reserve = true // the root's whole 0.1
	_, err = o.Start(ctx, guaranteed)
	require.NoError(t, err)
	before = spawns()
	big := req(root.ThreadID)
	big.ID, big.Reserve = "test/too-big", true
	_, err = o.Start(ctx, big)
	require.ErrorIs(t, err, ledger.ErrInsufficientBudget)
	require.ErrorIs(t, err, &thread.LimitError{Code: thread.CodeSpendExceeded})
	_, err = o.reg.Get(ctx, big.ID)
	require.ErrorIs(t, err, registry.ErrNotFound)
	_, err = o.ledger.Get(ctx, big.ID)
	require.ErrorIs(t, err, ledger.ErrNotFound)
	require.Equal(t, before, spawns())

	// A finished parent takes no child: the refusal names the parent and
	// its status, not the budget of an id that was never registered.
	_, err = o.Cancel(ctx, root.ThreadID, true)
	require.NoError(t, err)
	late := req(root.ThreadID)
	late.ID = "test/late"
	_, err = o.Start(ctx, late)
	require.EqualError(t, err, fmt.Sprintf("parent thread %q is cancelled: a finished thread takes no children", root.ThreadID))
	_, err = o.reg.Get(ctx, late.ID)
	require.ErrorIs(t, err, registry.ErrNotFound)
}

// TestPlannedStartNotEnqueued: a planned child that Redis registered but
// whose start task it did not take (a failover refused the connection)
// is left created, the error marked queue.ErrNotEnqueued (its caller's
// activation runs the spawn again); that rerun adopts it and enqueues
// its start, once. A start that is not planned is failed visibly, as
// no one starts it again.
func TestPlannedStartNotEnqueued(t *testing.T) {
	t.Parallel()
	o, r, digest := startSetup(t)
	ctx := t.Context()
	root, err := o.Start(ctx, StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Lyon"}, Bundle: digest})
	require.NoError(t, err)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	refused := l.Addr().String()
	require.NoError(t, l.Close())
	deadRedis := redis.NewClient(&redis.Options{Addr: refused, MaxRetries: -1})
	dead := asynq.NewClientFromRedisClient(deadRedis)
	t.Cleanup(func() { _ = dead.Close(); _ = deadRedis.Close() })
	live := o.enq
	o.enq = &queue.Enqueuer{Client: dead, Keys: live.Keys}

	req := StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Lyon"}, ParentID: root.ThreadID,
		ID: o.Runtime().PlannedID(IDRequest{Directive: "test/leads", ParentID: root.ThreadID}, root.CreatedAt, "turn/1/call/0"), Planned: true}
	_, err = o.Start(ctx, req)
	require.ErrorIs(t, err, queue.ErrNotEnqueued, "an infrastructure failure: the caller's activation runs again")
	kid, err := o.reg.Get(ctx, req.ID)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCreated, kid.Status, "left for the rerun to adopt, not ended enqueue_failed")

	other, err := o.reg.ListChildren(ctx, root.ThreadID)
	require.NoError(t, err)
	_, err = o.Start(ctx, StartRequest{Directive: "test/leads", Inputs: map[string]any{"city": "Nice"}, ParentID: root.ThreadID})
	require.ErrorIs(t, err, queue.ErrNotEnqueued)
	kids, err := o.reg.ListChildren(ctx, root.ThreadID)
	require.NoError(t, err)
	require.Len(t, kids, len(other)+1)
	for _, k := range kids {
		if k.ThreadID != req.ID {
			require.Equal(t, thread.StatusError, k.Status, "an unplanned start is failed visibly")
			require.Equal(t, "enqueue_failed", k.Error.Code)
		}
	}

	o.enq = live
	insp := asynq.NewInspectorFromRedisClient(r.Client)
	t.Cleanup(func() { _ = insp.Close() })
	aq := o.keys.QueueOf(kid.Queue, kid.ThreadID)
	start := queue.TaskID(queue.Activation{ThreadID: kid.ThreadID, Reason: "start"}, 0)
	_, err = insp.GetTaskInfo(aq, start)
	require.Error(t, err, "no start task yet")
	for range 2 {
		again, err := o.Start(ctx, req)
		require.NoError(t, err)
		require.Equal(t, kid.ThreadID, again.ThreadID, "adopted")
		require.Equal(t, thread.StatusCreated, again.Status)
		info, err := insp.GetTaskInfo(aq, start)
		require.NoError(t, err, "the adoption enqueued its start")
		require.Equal(t, asynq.TaskStatePending, info.State)
	}
	pending, err := insp.ListPendingTasks(aq)
	require.NoError(t, err)
	require.Len(t, pending, 2, "the root's start and the child's, once")
}
