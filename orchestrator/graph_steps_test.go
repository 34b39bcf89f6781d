package orchestrator

import (
	"encoding/json"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/directive"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// stepEvents builds a run's events from (type, payload) pairs, a second
// apart from t0.
func stepEvents(t *testing.T, t0 time.Time, pairs ...any) []transcript.Event {
	t.Helper()
	var out []transcript.Event
	for i := 0; i < len(pairs); i += 2 {
		b, err := json.Marshal(pairs[i+1])
		require.NoError(t, err)
		out = append(out, transcript.Event{Timestamp: t0.Add(time.Duration(i/2) * time.Second), Type: pairs[i].(string), Payload: b})
	}
	return out
}

// TestGraphStepsOvertaken: a foreach in flight when its run was
// cancelled ends with the run's graph_cancelled: status cancelled, ended
// then, its total from the pending checkpoint, its items told apart (a
// settled cancelled child, a started child not settled: both cancelled;
// a failed one; an ok one; one planned and never started and one never
// planned: not started).
func TestGraphStepsOvertaken(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	events := stepEvents(t, t0,
		transcript.TypeStepCompleted, transcript.StepCompleted{Step: 1, Node: "plan", Kind: "action", Status: "ok", RoutedBy: "next", NextNode: "fan", ElapsedMS: 5},
		transcript.TypeStepStarted, transcript.StepStarted{Step: 2, Node: "fan", Kind: "foreach", StartedAt: t0.Add(time.Second).Format(time.RFC3339Nano),
			Action: &transcript.StepAction{Directive: "d/x"}, Children: map[string]string{"0": "c0", "1": "c1", "2": "c2", "3": "c3", "4": "c4"}},
		transcript.TypeStateCheckpoint, transcript.StateCheckpoint{Step: 1, NextNode: "fan", Pending: json.RawMessage(`{"step": 2, "node": "fan", "kind": "foreach", "items": 6}`)},
		transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: "c0"},
		transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: "c1"},
		transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: "c2"},
		transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: "c3"},
		transcript.TypeForeachItemCompleted, transcript.ForeachItemCompleted{Step: 2, Node: "fan", Index: 0, Status: "ok", ThreadID: "c0"},
		transcript.TypeForeachItemCompleted, transcript.ForeachItemCompleted{Step: 2, Node: "fan", Index: 1, Status: "error", ThreadID: "c1",
			Error: &transcript.Error{Code: "cancelled", Message: "cancelled by request"}},
		transcript.TypeForeachItemCompleted, transcript.ForeachItemCompleted{Step: 2, Node: "fan", Index: 2, Status: "error", ThreadID: "c2",
			Error: &transcript.Error{Code: "tool_error", Message: "boom"}},
		transcript.TypeGraphCancelled, transcript.GraphCancelled{Step: 1, Node: "fan", CancelledChildren: []string{"c3", "c4"}},
	)
	steps := GraphSteps(events)
	require.Len(t, steps, 2)
	s := steps[1]
	require.Equal(t, graph.StepStatusCancelled, s.Status)
	require.Equal(t, t0.Add(10*time.Second), s.Ended, "ended with the run's cancel")
	require.Equal(t, t0.Add(time.Second), s.Started)
	require.Equal(t, 6, s.ItemsTotal)
	require.Equal(t, 4, s.ItemsDone, "ok, cancelled, failed, and c3, which the cancel stopped")
	require.Equal(t, 2, s.ItemsCancelled)
	require.Equal(t, 1, s.ItemsFailed)
	require.Equal(t, 1, s.ItemsSucceeded())
	require.Equal(t, 2, s.ItemsNotStarted(), "c4 planned, never started; item 5 never planned")

	// A step that completed is not overtaken; its failed count leaves
	// out the cancelled items its events told apart.
	done := GraphSteps(append(events[:len(events)-1:len(events)-1], stepEvents(t, t0.Add(time.Minute),
		transcript.TypeStepCompleted, transcript.StepCompleted{Step: 2, Node: "fan", Kind: "foreach", Status: "error", ItemsDone: 3, ItemsTotal: 6, ItemsFailed: 2,
			Error: &transcript.GraphStepError{Code: "foreach_item_failed", Message: "x"}},
		transcript.TypeGraphError, transcript.GraphErrorEvent{Code: "node_error", Message: "fan: x"})...))
	require.Equal(t, graph.StepStatusError, done[1].Status)
	require.Equal(t, "foreach_item_failed: x", done[1].Error)
	require.Equal(t, 1, done[1].ItemsFailed)
	require.Equal(t, 1, done[1].ItemsCancelled)
	require.Equal(t, 3, done[1].ItemsNotStarted())

	// A run failed as a whole with a step in flight (the duration limit).
	failed := GraphSteps(append(events[:len(events)-1:len(events)-1], stepEvents(t, t0.Add(time.Minute),
		transcript.TypeGraphError, transcript.GraphErrorEvent{Code: "duration_seconds_exceeded", Message: "too long"})...))
	require.Equal(t, graph.StepStatusError, failed[1].Status)
	require.Equal(t, "duration_seconds_exceeded: too long", failed[1].Error)
	require.Equal(t, 2, failed[1].ItemsCancelled)
}

// TestInFlightFromRecord: a run that ended with a step in flight and no
// event to say so (cancelled while it waited, before the cancel wrote
// graph_cancelled) has the step ended by the record: cancelled, at its
// end, or without an end when the run was continued since (its record's
// time is the resume's); a run still going keeps it in flight, with the
// record's item count.
func TestInFlightFromRecord(t *testing.T) {
	t.Parallel()
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	inFlight := func() []graph.StepRecord {
		return []graph.StepRecord{{Step: 1, Node: "a", Status: "ok"}, {Step: 2, Node: "fan", Kind: "foreach", ItemsDone: 1}}
	}
	cancelled := &registry.Record{Status: thread.StatusCancelled, UpdatedAt: end, Error: &registry.ErrorInfo{Code: "cancelled", Message: "cancelled by request"}}
	s := InFlight(inFlight(), cancelled)[1]
	require.Equal(t, graph.StepStatusCancelled, s.Status)
	require.Equal(t, end, s.Ended)

	continued := *cancelled
	continued.Status = thread.StatusContinued
	s = InFlight(inFlight(), &continued)[1]
	require.Equal(t, graph.StepStatusCancelled, s.Status)
	require.True(t, s.Ended.IsZero(), "a continued run's time is its resume's, not its end's")

	failed := &registry.Record{Status: thread.StatusError, UpdatedAt: end, Error: &registry.ErrorInfo{Code: "resume_state_invalid", Message: "bad"}}
	s = InFlight(inFlight(), failed)[1]
	require.Equal(t, graph.StepStatusError, s.Status)
	require.Equal(t, "resume_state_invalid: bad", s.Error)

	running := &registry.Record{Status: thread.StatusWaiting, CurrentNode: "fan", ItemsTotal: 4}
	s = InFlight(inFlight(), running)[1]
	require.Empty(t, s.Status)
	require.Equal(t, 4, s.ItemsTotal)
}

// TestFindGraphSuggests: a graph that is not there is told the one its
// name is a likely misspelling of, from the project's graphs or the
// user's; nothing when none is near.
func TestFindGraphSuggests(t *testing.T) {
	t.Parallel()
	fsys := fstest.MapFS{
		".ai/graphs/notes.yaml":                          &fstest.MapFile{Data: []byte("x")},
		".ai/graphs/review/pr.yml":                       &fstest.MapFile{Data: []byte("x")},
		directive.UserPrefix + "/.ai/graphs/deploy.yaml": &fstest.MapFile{Data: []byte("x")},
	}
	for name, want := range map[string]string{"notez": "; did you mean notes?", "review/pt": "; did you mean review/pr?", "deplyo": "; did you mean deploy?", "zzz": ""} {
		_, _, err := FindGraph(fsys, name)
		require.ErrorIs(t, err, ErrGraphNotFound)
		require.True(t, strings.HasSuffix(err.Error(), ".ai/tools/"+name+".yaml)"+want), err.Error())
	}
}
