package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// napGraph sleeps for 0, until a time long past (both go on at once),
// then for inputs.for.
const napGraph = `config:
  start: zero
  nodes:
    zero:
      type: sleep
      for: 0
      assign: {zero: "${result.slept_seconds}"}
      next: past
    past:
      type: sleep
      until: 2020-01-01T00:00:00Z
      assign: {past: "${result.slept_seconds}"}
      next: nap
    nap:
      type: sleep
      for: "${inputs.for}"
      assign: {slept: "${result.slept_seconds}"}
      next: done
    done:
      type: return
      output: {zero: "${state.zero}", past: "${state.past}", slept: "${state.slept}"}
`

// cappedGraph sleeps an hour in a run limited to 3 seconds.
const cappedGraph = `limits: {duration: 3}
config:
  start: nap
  nodes:
    nap:
      type: sleep
      for: 1h
      next: done
    done:
      type: return
`

// sleepEnv is a project with the sleep graphs and no worker yet. The
// workers the tests start run housekeeping every half second, so a wake
// housekeeping would give too early (or a lost one it would not find)
// shows within the sleeps.
func sleepEnv(t *testing.T) *spooltest.Env {
	return spooltest.New(t, spooltest.Options{Files: walkProject("0ms", map[string]string{"g/nap": napGraph, "g/capped": cappedGraph}), LeaseTTL: 2 * time.Second})
}

const fastHousekeeping = "SPOOL_RECOVER_INTERVAL=500ms"

// startSleep starts graph g and waits until it sleeps; it returns the
// record and the wake time `graph show --json` gives.
func startSleep(t *testing.T, e *spooltest.Env, g string, args ...string) (*registry.Record, time.Time) {
	t.Helper()
	res := e.Spool(append([]string{"graph", "run", g, "--json"}, args...)...)
	require.Equal(t, 0, res.Code, res.Stderr)
	var rec registry.Record
	res.JSON(t, &rec)
	waitRecord(t, e, rec.ThreadID, "sleeping", func(r *registry.Record) bool {
		return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForSleep
	})
	res = e.Spool("graph", "show", rec.ThreadID, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var shown struct {
		Status     string    `json:"status"`
		WaitingFor string    `json:"waiting_for"`
		WakeAt     time.Time `json:"wake_at"`
		StartedAt  time.Time `json:"started_at"`
		Node       string    `json:"current_node"`
		Nodes      []struct {
			Node   string `json:"node"`
			Detail string `json:"detail"`
		} `json:"nodes"`
	}
	res.JSON(t, &shown)
	require.Equal(t, "waiting", shown.Status)
	require.Equal(t, "sleep", shown.WaitingFor)
	require.False(t, shown.WakeAt.IsZero(), "graph show --json gives wake_at: %s", res.Stdout)
	require.Equal(t, "nap", shown.Node)
	for _, row := range shown.Nodes {
		if row.Node == "nap" {
			require.Equal(t, "sleeping until "+shown.WakeAt.UTC().Format(time.RFC3339), row.Detail, "the sleeping node's detail")
		}
	}
	text := e.Spool("graph", "show", rec.ThreadID)
	require.Equal(t, 0, text.Code, text.Stderr)
	require.Contains(t, text.Stdout, "sleeping until "+shown.WakeAt.UTC().Format(time.RFC3339))
	rec.StartedAt = shown.StartedAt
	return &rec, shown.WakeAt
}

// napCompleted checks a g/nap run that ended: completed, the sleep's step
// done once, no earlier than its wake time, the zero and past sleeps
// done at once.
func napCompleted(t *testing.T, e *spooltest.Env, final *registry.Record, wake time.Time, nap float64) {
	t.Helper()
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, float64(0), final.Outputs["zero"], "for 0 goes on at once")
	require.Equal(t, float64(0), final.Outputs["past"], "an until past goes on at once")
	require.GreaterOrEqual(t, final.Outputs["slept"], nap, "the sleep was not cut short")
	require.False(t, final.UpdatedAt.Before(wake), "ended at %s, before its wake at %s", final.UpdatedAt, wake)
	evs := events(t, e, final.ThreadID)
	var naps int
	for _, c := range payloads[transcript.StepCompleted](t, evs, transcript.TypeStepCompleted) {
		if c.Node == "nap" {
			naps++
		}
	}
	require.Equal(t, 1, naps, "the sleep completed once")
	waits := payloads[transcript.GraphWaiting](t, evs, transcript.TypeGraphWaiting)
	require.Len(t, waits, 1)
	require.Equal(t, "sleep", waits[0].WaitingFor)
}

// TestGraphSleep: validation names a sleep node's bad for or until on
// one line each. A sleep node holds no worker while the run sleeps, so
// a worker killed meanwhile loses nothing: another wakes the run once,
// at its time and not before, also when the worker died as the sleep
// began (its wake time durable, the run not yet suspended: housekeeping
// takes the run over) or between the suspension and the delayed task
// (housekeeping finds the lost wake by the registry's wake_at). A cancel
// ends a sleeping run at once, and a sleep past the run's duration limit
// ends it duration_seconds_exceeded at the limit.
func TestGraphSleep(t *testing.T) {
	t.Parallel()
	t.Run("validate", func(t *testing.T) {
		t.Parallel()
		e := spooltest.New(t, spooltest.Options{Files: walkProject("0ms", map[string]string{"g/nap": napGraph, "g/bad": `config:
  start: a
  nodes:
    a: {type: sleep, for: 1m, until: "2026-03-01T09:00:00Z", next: b}
    b: {type: sleep, for: soon, next: c}
    c: {type: sleep, next: done}
    done: {type: return}
`})})
		res := e.Spool("graph", "validate", "g/bad")
		require.Equal(t, 1, res.Code, res.Stdout+res.Stderr)
		require.Contains(t, res.Stdout, "error: node a: until: a sleep node takes for or until, not both\n")
		require.Contains(t, res.Stdout, `error: node b: for: "soon" is not a duration`)
		require.Contains(t, res.Stdout, "error: node c: for: missing: a sleep node needs for")
		res = e.Spool("graph", "validate", "g/nap")
		require.Equal(t, 0, res.Code, res.Stdout+res.Stderr)
	})
	t.Run("across a worker restart", func(t *testing.T) {
		t.Parallel()
		e := sleepEnv(t)
		first := e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		rec, wake := startSleep(t, e, "g/nap", "--input", "for=4s")
		require.WithinDuration(t, rec.StartedAt.Add(4*time.Second), wake, 2*time.Second, "the wake is the sleep's end")
		first.Kill()
		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		final := e.Wait([]string{rec.ThreadID}, 2*time.Minute)[rec.ThreadID]
		napCompleted(t, e, final, wake, 4)
		require.Equal(t, int64(2), final.Activation, "activated to start and woken once")
	})
	for _, point := range []string{"graph:sleep_checkpointed", "graph:sleep_suspended"} {
		t.Run(strings.ReplaceAll(point, ":", "_"), func(t *testing.T) {
			t.Parallel()
			e := sleepEnv(t)
			doomed := e.Start([]string{fastHousekeeping, "SPOOL_FAULT_KILL_AT=" + point}, "worker", "--concurrency", "2")
			res := e.Spool("graph", "run", "g/nap", "--input", "for=3s", "--json")
			require.Equal(t, 0, res.Code, res.Stderr)
			var rec registry.Record
			res.JSON(t, &rec)
			require.Eventually(t, doomed.Exited, time.Minute, 20*time.Millisecond, "the worker never reached %s:\n%s", point, doomed.Log())
			e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
			final := e.Wait([]string{rec.ThreadID}, 2*time.Minute)[rec.ThreadID]
			napCompleted(t, e, final, final.StartedAt.Add(3*time.Second), 3)
			require.LessOrEqual(t, final.Activation, int64(3), "taken over once, woken once")
		})
	}
	t.Run("cancel", func(t *testing.T) {
		t.Parallel()
		e := sleepEnv(t)
		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		rec, _ := startSleep(t, e, "g/nap", "--input", "for=1h")
		res := e.Spool("graph", "cancel", rec.ThreadID)
		require.Equal(t, 0, res.Code, res.Stderr)
		final := e.Wait([]string{rec.ThreadID}, time.Minute)[rec.ThreadID]
		require.Equal(t, thread.StatusCancelled, final.Status)
	})
	t.Run("past the duration limit", func(t *testing.T) {
		t.Parallel()
		e := sleepEnv(t)
		e.Start([]string{fastHousekeeping}, "worker", "--concurrency", "2")
		rec, wake := startSleep(t, e, "g/capped")
		limit := rec.StartedAt.Add(3 * time.Second)
		require.WithinDuration(t, limit, wake, time.Second, "it wakes at its limit, not in an hour")
		final := e.Wait([]string{rec.ThreadID}, 2*time.Minute)[rec.ThreadID]
		require.Equal(t, thread.StatusError, final.Status)
		require.NotNil(t, final.Error)
		require.Equal(t, thread.CodeDurationExceeded, final.Error.Code)
		require.False(t, final.UpdatedAt.Before(limit), "ended at %s, before its limit at %s", final.UpdatedAt, limit)
		require.Less(t, final.UpdatedAt.Sub(limit), time.Minute, "ended at its limit, not at the sleep's end")
	})
}
