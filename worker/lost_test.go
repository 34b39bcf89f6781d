package worker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/provider"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestLostChild: Redis lost a child's registration (and with it the
// parent's suspension) while the parent's checkpoint, which waits on the
// child, is durable. The recovered parent is not failed over and over on
// a thread that does not exist: its spawn call is answered with the
// child's loss (thread_lost), and it goes on.
func TestLostChild(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	id := h.startParentOfKid()
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, thread.StatusWaiting, h.record(id).Status)
	kids, err := h.o.Children(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	kid := kids[0].ThreadID

	// What Redis kept: the parent running (its suspension lost) with no
	// lease, and no trace of the child.
	rdb, ks := h.o.Runtime().Services().Redis, h.o.Runtime().Services().Keys
	require.NoError(t, h.insp.DeleteTask(ks.Queue(kids[0].Queue), kid))
	require.NoError(t, rdb.Del(h.ctx, ks.Thread(kid), ks.Ledger(kid), ks.Waits(id), ks.Waiters(kid)).Err())
	require.NoError(t, rdb.SRem(h.ctx, ks.Active(kid), kid).Err())
	require.NoError(t, rdb.SRem(h.ctx, ks.Children(id), kid).Err())
	require.NoError(t, rdb.HSet(h.ctx, ks.Thread(id), "status", string(thread.StatusRunning)).Err())

	orphans, err := h.o.Runtime().Services().Activations.Orphans(h.ctx)
	require.NoError(t, err)
	require.Len(t, orphans, 1)
	require.NoError(t, h.activate(id, "recover", orphans[0].Version))
	rec := h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "parent done", rec.Result)

	answers := eventsOf[transcript.ToolCallResult](h, id, transcript.TypeToolCallResult)
	require.NotEmpty(t, answers)
	answer := answers[len(answers)-1]
	require.True(t, answer.IsError)
	require.Contains(t, answer.Output, "thread_lost")
	require.True(t, strings.Contains(answer.Output, kid), answer.Output)
}

// TestLostSubtreeRestored: Redis loses every write since the moment a
// parent's first turn began (a restart or failover short of its last
// writes): the child it started, the grandchild the child started, their
// turns, charges and ends. Both ran, and their signed transcripts and
// thread.json are in the store. The recovered parent restores the child
// from the store (running, from its last checkpoint: it was waiting on
// the grandchild), the child's next activation restores the grandchild
// (finished), and the tree completes with every answer the lost threads
// gave: no thread_lost, no turn run twice, and every ledger entry equal to
// its transcript, along the whole path.
func TestLostSubtreeRestored(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	rds := &testenv.Redis{Namespace: h.o.Runtime().Services().Keys.Namespace(), Universal: h.o.Runtime().Services().Redis}
	var snap *testenv.Snapshot
	spawn := call("rye/agent/threads/thread_directive", `{"directive_name":"h/kid"}`)
	h.prov.script("h/a", reply{fn: func(context.Context, *provider.Request) (*provider.Response, error) {
		snap = rds.Snapshot(t) // what the restarted Redis will hold
		out := *spawn.resp
		return &out, nil
	}}, say("parent done"))
	h.prov.script("h/kid", call("rye/agent/threads/thread_directive", `{"directive_name":"h/tight"}`), say("kid done"))
	h.prov.script("h/tight", say("grandkid done"))
	id := h.start("h/a", thread.Limits{})
	require.NoError(t, h.activate(id, "start", 0))
	require.Equal(t, thread.StatusWaiting, h.record(id).Status)
	kid := onlyChild(t, h, id)
	require.NoError(t, h.activate(kid, "start", 0))
	require.Equal(t, thread.StatusWaiting, h.record(kid).Status)
	grandkid := onlyChild(t, h, kid)
	require.NoError(t, h.activate(grandkid, "start", 0))
	require.Equal(t, thread.StatusCompleted, h.record(grandkid).Status)

	snap.Rollback(t)
	_, err := h.o.Record(h.ctx, kid)
	require.ErrorIs(t, err, registry.ErrNotFound, "Redis lost the child")
	require.Equal(t, thread.StatusRunning, h.record(id).Status, "and the parent's suspension")

	// The parent's lease lapses (its activation is gone), and housekeeping
	// recovers it.
	var orphan registry.Orphan
	require.Eventually(t, func() bool {
		orphans, err := h.o.Runtime().Services().Activations.Orphans(h.ctx)
		require.NoError(t, err)
		for _, o := range orphans {
			if o.ThreadID == id {
				orphan = o
				return true
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond)
	require.NoError(t, h.activate(id, "recover", orphan.Version))
	restored := h.record(kid)
	require.Equal(t, thread.StatusRunning, restored.Status, "restored as it stood: waiting on its child, from its last checkpoint")
	require.NotEmpty(t, restored.Extra[registry.RestoredField])
	require.Equal(t, id, restored.ParentID)
	require.Equal(t, []string{id}, restored.Ancestors)
	require.Equal(t, thread.StatusWaiting, h.record(id).Status, "the parent waits on the restored child")

	h.drain(false)
	rec := h.record(id)
	require.Equal(t, thread.StatusCompleted, rec.Status, "%+v", rec.Error)
	require.Equal(t, "parent done", rec.Result)
	answers := eventsOf[transcript.ToolCallResult](h, id, transcript.TypeToolCallResult)
	require.Len(t, answers, 1)
	require.False(t, answers[0].IsError, answers[0].Output)
	require.Contains(t, answers[0].Output, "kid done")
	answers = eventsOf[transcript.ToolCallResult](h, kid, transcript.TypeToolCallResult)
	require.Len(t, answers, 1)
	require.Contains(t, answers[0].Output, "grandkid done")
	for _, c := range []string{kid, grandkid} {
		r := h.record(c)
		require.Equal(t, thread.StatusCompleted, r.Status, c)
		require.NotEmpty(t, r.Extra[registry.RestoredField], c)
	}
	require.Equal(t, grandkid, onlyChild(t, h, kid))
	require.Equal(t, kid, onlyChild(t, h, id))

	// No turn ran twice: each thread called the model once per answer.
	h.prov.mu.Lock()
	calls := map[string]int{id: h.prov.next[id], kid: h.prov.next[kid], grandkid: h.prov.next[grandkid]}
	h.prov.mu.Unlock()
	require.Equal(t, map[string]int{id: 2, kid: 2, grandkid: 1}, calls)

	// The ledger equals the transcripts, on every level.
	own := map[string]int64{}
	for _, c := range []string{id, kid, grandkid} {
		entry, err := h.o.LedgerEntry(h.ctx, c)
		require.NoError(t, err)
		own[c] = recordedNano(t, h, c)
		require.Equal(t, own[c], entry.OwnNano, c)
		require.Zero(t, entry.OverrunNano, c)
		require.Equal(t, string(thread.StatusCompleted), entry.Status, c)
	}
	for c, want := range map[string]int64{id: own[id] + own[kid] + own[grandkid], kid: own[kid] + own[grandkid], grandkid: own[grandkid]} {
		entry, err := h.o.LedgerEntry(h.ctx, c)
		require.NoError(t, err)
		require.Equal(t, want, entry.ActualNano, c)
	}
}

// onlyChild is the one child of id the registry lists.
func onlyChild(t *testing.T, h *harness, id string) string {
	t.Helper()
	kids, err := h.o.Children(h.ctx, id)
	require.NoError(t, err)
	require.Len(t, kids, 1)
	return kids[0].ThreadID
}

// recordedNano is the spend of the turns id's transcript records.
func recordedNano(t *testing.T, h *harness, id string) int64 {
	t.Helper()
	tr, err := transcript.Read(h.ctx, h.o.Runtime().Services().Store, id, h.o.Runtime().Services().Keyring, transcript.Strict)
	require.NoError(t, err)
	cs, err := orchestrator.RecordedCharges(tr)
	require.NoError(t, err)
	var n int64
	for _, c := range cs {
		v, err := ledger.ToNano(c.Amount)
		require.NoError(t, err)
		n += v
	}
	return n
}
