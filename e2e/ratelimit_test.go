package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestRateLimitAcrossWorkers: concurrent: 1 serializes a model's calls
// across two workers, while a thread of an unlimited model runs on the
// only slot of a worker (waiting threads hold none); and a worker killed
// holding the concurrency lease frees it within the lease TTL.
func TestRateLimitAcrossWorkers(t *testing.T) {
	t.Parallel()
	e := spooltest.New(t, spooltest.Options{Files: map[string]string{
		".ai/directives/r/x.md":             directive("x", `turns="3"`, fsPerms, `<success>done</success>`),
		".ai/config/agent/rate_limits.yaml": "rate_limits: [{match: 'script:scripts/limited.yaml', concurrent: 1}]\n",
		"scripts/limited.yaml":              script("limited"),
		"scripts/free.yaml":                 script("free"),
	}})
	var ids []string
	for range 4 {
		ids = append(ids, startThread(t, e, "r/x", "--model", "script:scripts/limited.yaml"))
	}
	e.StartWorker("--concurrency", "1")
	e.StartWorker("--concurrency", "1")
	free := runCompleted(t, e, "r/x", "--model", "script:scripts/free.yaml")
	final := e.Wait(ids, 2*time.Minute)
	type span struct{ from, to time.Time }
	spans := []span{}
	for _, id := range ids {
		require.Equal(t, thread.StatusCompleted, final[id].Status, "%+v", final[id].Error)
		var started, done time.Time
		for _, ev := range events(t, e, id) {
			// The call runs between the thread's last event before it
			// and its answer.
			if ev.Type == transcript.TypeCognitionOut {
				done = ev.Timestamp
				break
			}
			started = ev.Timestamp
		}
		require.False(t, done.IsZero())
		spans = append(spans, span{started, done})
	}
	overlaps := 0
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			// Each call takes 800ms; two that overlapped would both have
			// answered within 800ms of each other.
			d := spans[i].to.Sub(spans[j].to)
			if d < 0 {
				d = -d
			}
			if d < 700*time.Millisecond {
				overlaps++
			}
		}
	}
	require.Zero(t, overlaps, "the limited model's calls ran one at a time across both workers")
	last := final[ids[0]].UpdatedAt
	for _, id := range ids {
		if final[id].UpdatedAt.After(last) {
			last = final[id].UpdatedAt
		}
	}
	require.True(t, free.UpdatedAt.Before(last), "the free thread ran while limited ones waited, holding no slot")

	// A worker killed in the middle of a limited call: its lease lapses
	// within the lease TTL, and the next thread's call is admitted.
	w := e.StartWorker("--concurrency", "1")
	slow := startThread(t, e, "r/x", "--model", "script:scripts/limited.yaml")
	require.Eventually(t, func() bool {
		r, err := e.Orch.Record(context.Background(), slow)
		return err == nil && r.Status == thread.StatusRunning
	}, time.Minute, 10*time.Millisecond)
	time.Sleep(200 * time.Millisecond)
	w.Kill()
	next := startThread(t, e, "r/x", "--model", "script:scripts/limited.yaml")
	got := e.Wait([]string{slow, next}, 2*time.Minute)
	require.Equal(t, thread.StatusCompleted, got[next].Status, "admitted once the dead worker's lease lapsed")
	require.Equal(t, thread.StatusCompleted, got[slow].Status, "recovered")
}
