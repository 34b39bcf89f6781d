package e2e

import (
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/internal/testing/testenv"
)

// TestWorkerAndSchedulerMetrics: a worker's /metrics carries asynq's queue
// metrics and spool's own after it ran threads (turns, tokens, spend by
// directive and model, model call and checkpoint latency, threads by
// status, ledger rejections); a scheduler's carries the queue metrics too.
func TestWorkerAndSchedulerMetrics(t *testing.T) {
	t.Parallel()
	files := coordProject()
	// t/poor spends, then spawns a child with a guaranteed budget
	// (reserve: true) whose spend limit (capped at the parent's 0.01) no
	// longer fits what the parent has left.
	files[".ai/directives/t/poor.md"] = directive("poor", `turns="4" spend="0.01"`, spawnPerms, `<success>done</success>`)
	files["scripts/poor.yaml"] = `context_window: 200000
price: {input_per_mtok: 1.00, output_per_mtok: 5.00}
directives:
  "t/poor":
    - tool_calls: [{tool: rye/file-system/fs_read, input: {path: "nothing.txt"}}]
      usage: {input: 100, output: 10}
    - tool_calls: [{tool: rye/agent/threads/thread_directive, input: {directive_name: t/leaf, reserve: true}}]
      usage: {input: 100, output: 10}
    - text: "the child did not fit: {{.last_tool_result}}"
      usage: {input: 100, output: 10}
`
	e := spooltest.New(t, spooltest.Options{Files: files})
	addr := func() string {
		p, err := testenv.FreePort()
		require.NoError(t, err)
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
	wAddr, sAddr := addr(), addr()
	e.StartWorker("--concurrency", "2", "--metrics-addr", wAddr)
	e.Start(nil, "scheduler", "--metrics-addr", sAddr)

	runCompleted(t, e, "t/spawner", "--model", "script:scripts/c.yaml")
	poor, res := runJSON(t, e, "t/poor", "--model", "script:scripts/poor.yaml")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Contains(t, poor.Result, "cannot set 0.01 USD aside")

	fetch := func(addr string) string {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			return ""
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			return ""
		}
		return string(b)
	}
	lookup := func(body, series string) (float64, bool) {
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`).FindStringSubmatch(body)
		if m == nil {
			return 0, false
		}
		v, err := strconv.ParseFloat(m[1], 64)
		return v, err == nil
	}
	value := func(body, series string) float64 {
		t.Helper()
		v, ok := lookup(body, series)
		require.True(t, ok, "no %s in:\n%s", series, body)
		return v
	}

	// The spawner's children run on after it (async spawns), and a
	// thread's metrics and asynq's task completion land a moment after
	// its record says completed (what --wait waits for): read the worker's
	// /metrics once all of that is in.
	model := `model="script:scripts/c.yaml"`
	var w string
	require.Eventually(t, func() bool {
		w = fetch(wAddr)
		leaves, _ := lookup(w, `spool_threads_finished_total{directive="t/leaf",status="completed"}`)
		poorDone, _ := lookup(w, `spool_threads_finished_total{directive="t/poor",status="completed"}`)
		tasks, _ := lookup(w, `asynq_queue_tasks{queue="default",state="completed"}`)
		return leaves == 2 && poorDone == 1 && tasks >= 4
	}, 30*time.Second, 100*time.Millisecond, "t/spawner may start two of its three leaves; four activations' tasks complete:\n%s", w)
	require.Equal(t, 2.0, value(w, `spool_turns_total{directive="t/spawner",`+model+`}`))
	require.Greater(t, value(w, `spool_tokens_total{directive="t/spawner",kind="input",`+model+`}`), 0.0)
	require.Greater(t, value(w, `spool_spend_usd_total{directive="t/spawner",`+model+`}`), 0.0)
	require.GreaterOrEqual(t, value(w, `spool_checkpoint_seconds_count`), 7.0, "one per turn of the four threads")
	require.GreaterOrEqual(t, value(w, `spool_model_call_seconds_count{`+model+`}`), 4.0)
	require.Equal(t, 1.0, value(w, `spool_ledger_rejections_total{kind="reserve"}`), "t/poor's child did not fit")
	require.Contains(t, w, `asynq_queue_latency_seconds{queue="default"}`)

	var s string
	require.Eventually(t, func() bool { s = fetch(sAddr); return s != "" }, 30*time.Second, 100*time.Millisecond)
	require.True(t, strings.Contains(s, `asynq_queue_tasks{queue="default",state="pending"}`), "scheduler /metrics:\n%s", s)
	require.Contains(t, s, "spool_scheduler_")
}
