package worker

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/admission"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/thread"
)

// TestLostGrantRequestsOnce: an activation that lost its grant leaves its
// run one admission request, the recovery at its version, which the
// registry's orphan recovery makes too: its task is done for asynq, whose
// retry asked again under the task's own id, so a run waited twice for
// its key (blocked{reason="concurrency"} read 6 for 5 runs of one key).
func TestLostGrantRequestsOnce(t *testing.T) {
	t.Parallel()
	h := setupWith(t, nil, harnessConfig{noRenew: true})
	h.publish("version: 1\nconcurrency:\n  - {name: per_dir, directives: ['h/*'], key: '${name}', max: 1}\n")
	h.prov.script("h/a", call("t/sleep", `{}`), say("never"))
	sv := h.w.o.Services()
	id := h.startQueued("h/a")
	q := sv.Keys.Queue(queue.DefaultQueue)
	ti, err := h.insp.GetTaskInfo(q, id)
	require.NoError(t, err)
	require.NoError(t, h.insp.DeleteTask(q, id))
	task := asynq.NewTask(ti.Type, ti.Payload)

	// The grant lapses unrenewed: the activation stops and hands back.
	err = h.w.handle(h.ctx, task)
	require.Equal(t, thread.StatusRunning, h.record(id).Status, "handed back")
	// Another run of the key takes the slot the lost grant freed (unless
	// the lost run's own request has it), and housekeeping finds the
	// thread without a lease: its recovery requests it.
	other := h.startQueued("h/a")
	_, _, err2 := h.w.o.Recover(h.ctx)
	require.NoError(t, err2)
	if err != nil {
		require.NoError(t, h.w.handle(h.ctx, task), "asynq's retry of the task") // what asynq does with an error
	}

	acts, err := sv.Redis.HGetAll(h.ctx, sv.Keys.AdmTenant(thread.DefaultTenant, "acts")).Result()
	require.NoError(t, err)
	var mine []string
	for act, raw := range acts {
		var e admission.Entry
		require.NoError(t, json.Unmarshal([]byte(raw), &e), raw)
		if e.Run == id {
			mine = append(mine, act)
		}
	}
	require.Equal(t, []string{fmt.Sprintf("%s@recover-%d", id, h.record(id).Version)}, mine,
		"the lost run's admission requests (the other run: %s)", other)
	st := h.tenantState(thread.DefaultTenant)
	require.Equal(t, []int{1, 1}, []int{atoi(st["n:granted:"+queue.DefaultQueue]), atoi(st["n:blocked:concurrency:"+queue.DefaultQueue])},
		"one of the two runs holds the key, the other waits for it: %v", st)
}
