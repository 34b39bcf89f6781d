package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// webhookFailoverScript: three file writes and an answer, a second a
// model call, so the test can cut the replica off while the run runs.
const webhookFailoverScript = `context_window: 200000
price: {input_per_mtok: 3.00, output_per_mtok: 15.00}
latency: 1s
directives:
  "f/solo":
    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: "1.txt", content: "one"}}]
      usage: {input: 101, output: 11}
    - tool_calls: [{tool: rye/file-system/fs_write, input: {path: "2.txt", content: "two"}}]
      usage: {input: 202, output: 22}
    - text: "solo done"
      usage: {input: 303, output: 33}
`

// TestWebhookSurvivesLossyFailover: a real Sentinel failover loses a
// root's end, the outbox entry its commit wrote and the delivery the
// relay made of it, all acknowledged on the master alone while the
// endpoint was failing. After the promotion the event is not lost: a
// worker recovers the run (orphaned at its old version), finds its
// turns in the transcript, recharges what the ledger lost and commits
// its end again, with the outbox entry; and the endpoint,
// up again, accepts the run.completed event with the webhook-id it was
// first tried with (receivers dedupe on it), every attempt carrying that
// one id; the run ran once and its ledger equals its transcript.
func TestWebhookSurvivesLossyFailover(t *testing.T) {
	t.Parallel()
	hook := &hookReceiver{fail: 1 << 30}
	hook.serve(t, "127.0.0.1:0")
	ps := testenv.NewPrivateSentinel(t, time.Second)
	e := spooltest.New(t, spooltest.Options{Redis: ps.Redis, Files: map[string]string{
		".ai/directives/f/solo.md": directive("solo", `turns="6" spend="1.0"`, fsPerms, `<success>done</success>`),
		".ai/config/webhooks.yaml": "endpoints:\n  ops:\n    url: http://" + hook.addr + "/hook\n    secret_env: TEST_SPOOL_HOOK_SECRET\n",
		"scripts/solo.yaml":        webhookFailoverScript,
	}})
	e.Orch = e.Orch.WithLogger(quiet())
	env := []string{"TEST_SPOOL_HOOK_SECRET=whsec_c3Bvb2wtd2ViaG9vaw=="}
	workers := []*spooltest.Proc{e.Start(env, "worker", "--concurrency", "4"), e.Start(env, "worker", "--concurrency", "4")}
	sched := e.Start(env, "scheduler", "--housekeeping-interval", "1s")
	ctx := context.Background()

	res := e.Spool("thread", "run", "f/solo", "--model", "script:scripts/solo.yaml", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var started struct {
		ThreadID string `json:"thread_id"`
	}
	res.JSON(t, &started)
	id := started.ThreadID
	eventID := orchestrator.WebhookEventID(id, "run.completed", "")

	// The run runs: the replica has its start, and from now on nothing.
	master := ps.Master.Client(t)
	status := func() thread.Status {
		st, _ := master.HGet(ctx, e.Keys.Thread(id), "status").Result()
		return thread.Status(st)
	}
	require.Eventually(t, func() bool { return status() == thread.StatusRunning }, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, ps.InSync(ctx))
	require.NoError(t, ps.CutOffReplica(ctx))
	frozen := time.Now()
	require.NotEqual(t, thread.StatusCompleted, status(), "the run ended before the replica was cut off: the machine is too slow for this test's 1 s model calls")

	// It ends on the master alone, and its event is tried there (and
	// refused: the endpoint fails), so the outbox entry and the delivery
	// are both made and both lost.
	require.Eventually(t, func() bool {
		for _, r := range hook.requests() {
			if r.id == eventID {
				return true
			}
		}
		return false
	}, 45*time.Second, 20*time.Millisecond, "the completion's delivery is tried on the master")
	require.Equal(t, thread.StatusCompleted, status())

	promoted, took, err := ps.LoseMaster(ctx)
	require.NoError(t, err)
	require.Equal(t, ps.Replica.Addr, promoted)
	failedOver := time.Now()
	killed := failedOver.Add(-took)
	newMaster := ps.Replica.Client(t)
	st, err := newMaster.HGet(ctx, e.Keys.Thread(id), "status").Result()
	require.NoError(t, err)
	t.Logf("after the failover the new master has the run %s", st)
	hook.mu.Lock()
	hook.fail = 0 // the endpoint is up again
	hook.mu.Unlock()

	final := e.Wait([]string{id}, 2*time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, "solo done", final.Result)
	require.Eventually(t, func() bool { return hook.accepted()[eventID] >= 1 }, time.Minute, 50*time.Millisecond,
		"the completion lost with the failover is delivered")
	delivered := time.Now()
	for _, r := range hook.requests() {
		require.Equal(t, eventID, r.id, "every attempt carries the event's one id")
		require.True(t, strings.Contains(string(r.body), `"type":"run.completed"`), string(r.body))
	}

	// It ran once: one call per file, and its ledger equals its transcript.
	calls := payloads[transcript.ToolCallResult](t, events(t, e, id), transcript.TypeToolCallResult)
	require.Len(t, calls, 2)
	entry, err := e.Orch.LedgerEntry(ctx, id)
	require.NoError(t, err)
	require.Equal(t, recordedSpend(t, e, id), entry.OwnNano)
	for _, w := range workers {
		require.False(t, w.Exited(), "the workers survive the failover")
	}
	require.False(t, sched.Exited(), "the scheduler survives the failover")
	t.Logf("webhook failover: replica frozen %s before the kill, promoted %s after it; the lost completion delivered %s after the failover (%d attempts in all, %d accepted, one id)",
		killed.Sub(frozen).Round(time.Millisecond), failedOver.Sub(killed).Round(time.Millisecond),
		delivered.Sub(failedOver).Round(time.Millisecond), len(hook.requests()), hook.accepted()[eventID])
}
