package worker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestCoordinator: a coordination call is answered, refused as the
// model sees it, or becomes a pending wait; it reaches only its caller's
// tree unless the caller may reach any.
func TestCoordinator(t *testing.T) {
	t.Parallel()
	h := setup(t, nil, Config{})
	caller := h.start("h/a", thread.Limits{})
	other := h.start("h/kid", thread.Limits{})
	rec := h.record(caller)
	c := &coordinator{o: h.o.Runtime(), reg: h.o.Runtime().Services().Registry, rec: rec, cfg: config.Coordination{WaitMaxThreads: 2, WaitDefaultTimeout: time.Minute}}
	run := func(input string) coordination {
		t.Helper()
		res, err := c.run(h.ctx, json.RawMessage(input))
		require.NoError(t, err)
		return res
	}

	res := run(`{"operation":`)
	require.True(t, res.isText && res.isError)
	require.Contains(t, res.text, "bad orchestrator parameters")

	res = run(`{"operation":"get_status"}`)
	require.False(t, res.isError)
	require.Equal(t, caller, res.answer.(*registry.Record).ThreadID, "a call that names no thread is about its caller")

	res = run(`{"operation":"get_status","thread_id":"` + other + `"}`)
	require.True(t, res.isError)
	require.Contains(t, res.answer.(map[string]any)["error"], "is not in this thread's tree")
	c.rec = &registry.Record{ThreadID: caller, Capabilities: []string{AnyThreadCapability}}
	res = run(`{"operation":"get_status","thread_id":"` + other + `"}`)
	require.False(t, res.isError, "%v", res.answer)
	c.rec = rec

	res = run(`{"operation":"wait_threads","thread_ids":["a","b","c"]}`)
	require.True(t, res.isError)
	require.Contains(t, res.answer.(map[string]any)["error"], "wait_threads takes 1 to 2 thread_ids")
	res = run(`{"operation":"wait_threads","thread_ids":["` + caller + `"]}`)
	require.NotNil(t, res.wait)
	require.Equal(t, []string{caller}, res.wait.Threads)
	require.WithinDuration(t, h.o.Now().Add(time.Minute), res.wait.Deadline, 5*time.Second, "coordination.yaml's default timeout")

	res = run(`{"operation":"make_tea"}`)
	require.True(t, res.isError)
	require.Contains(t, res.answer.(map[string]any)["error"], `unknown orchestrator operation "make_tea"`)
}
