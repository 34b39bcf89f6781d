package e2e

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// TestQueuePause: a paused queue keeps its runs' activations queued
// while workers serve it (the runs stay created), `queue list` says so,
// and unpaused they run to completion; pausing twice is no error; a bad
// name is one line, exit 2.
func TestQueuePause(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: apiProject()})
	e.StartWorker("--concurrency", "2")
	// The queue exists once a run went through it.
	r := e.Spool("thread", "run", "t/greet", "--input", "name=a", "--model", "script:scripts/api.yaml", "--wait")
	require.Equal(t, 0, r.Code, r.Stderr)

	for range 2 {
		r = e.Spool("queue", "pause", "default")
		require.Equal(t, 0, r.Code, r.Stderr)
		require.Contains(t, r.Stdout, "queue default paused")
	}
	r = e.Spool("thread", "run", "t/greet", "--input", "name=b", "--model", "script:scripts/api.yaml", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var rec registry.Record
	r.JSON(t, &rec)
	time.Sleep(2 * time.Second) // a served queue would have run it by now
	recs, err := e.Orch.Records(t.Context(), []string{rec.ThreadID})
	require.NoError(t, err)
	require.Equal(t, thread.StatusCreated, recs[0].Status, "held in the paused queue")
	r = e.Spool("queue", "list", "--json")
	require.Equal(t, 0, r.Code, r.Stderr)
	var l struct {
		Queues []orchestrator.QueueState `json:"queues"`
	}
	r.JSON(t, &l)
	require.Len(t, l.Queues, 1)
	require.Equal(t, "default", l.Queues[0].Name)
	require.True(t, l.Queues[0].Paused)
	require.Equal(t, 1, l.Queues[0].Pending)

	r = e.Spool("queue", "unpause", "default")
	require.Equal(t, 0, r.Code, r.Stderr)
	final := e.Wait([]string{rec.ThreadID}, time.Minute)[rec.ThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status)
	r = e.Spool("queue", "list")
	require.Equal(t, 0, r.Code, r.Stderr)
	require.Contains(t, r.Stdout, "default      running")

	oneLine(t, e.Spool("queue", "pause", "no such"), 2, "")
	oneLine(t, e.Spool("queue", "pause"), 2, "one queue name")
}
