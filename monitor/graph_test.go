package monitor

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/thread"
)

// TestForeachSettle: a foreach's bar counts cancelled items apart from
// failed ones and from those never started, whether its children say so
// (a child still running when the cancel ended its step is being
// cancelled) or, for a foreach of tools, its step does; a paused child
// counts as running, and as paused among them.
func TestForeachSettle(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		children []thread.Status
		step     graph.StepRecord
		want     foreachView
	}{
		{"cancelled, children", []thread.Status{thread.StatusCompleted, thread.StatusError, thread.StatusCancelled, thread.StatusRunning, "planned"},
			graph.StepRecord{Status: graph.StepStatusCancelled, ThreadIDs: []string{"a", "b", "c", "d", "e"}, ItemsTotal: 8, ItemsDone: 4, ItemsFailed: 1, ItemsCancelled: 2},
			foreachView{Total: 8, Done: 1, Failed: 1, Cancelled: 2, Pending: 4}},
		{"in flight, children", []thread.Status{thread.StatusCompleted, thread.StatusCancelled, thread.StatusRunning},
			graph.StepRecord{ThreadIDs: []string{"a", "b", "c"}, ItemsTotal: 5, ItemsDone: 2, ItemsCancelled: 1},
			foreachView{Total: 5, Done: 1, Cancelled: 1, Running: 1, Pending: 2}},
		{"in flight, paused children", []thread.Status{thread.StatusCompleted, thread.StatusPaused, thread.StatusPaused, thread.StatusRunning},
			graph.StepRecord{ThreadIDs: []string{"a", "b", "c", "d"}, ItemsTotal: 5, ItemsDone: 1},
			foreachView{Total: 5, Done: 1, Running: 3, Paused: 2, Pending: 1}},
		{"cancelled while paused, children", []thread.Status{thread.StatusCompleted, thread.StatusPaused},
			graph.StepRecord{Status: graph.StepStatusCancelled, ThreadIDs: []string{"a", "b"}, ItemsTotal: 2, ItemsDone: 2, ItemsCancelled: 1},
			foreachView{Total: 2, Done: 1, Cancelled: 1}},
		{"cancelled, tools", nil,
			graph.StepRecord{Status: graph.StepStatusCancelled, ItemsTotal: 6, ItemsDone: 4, ItemsFailed: 1, ItemsCancelled: 1},
			foreachView{Total: 6, Done: 2, Failed: 1, Cancelled: 1, Pending: 2}},
		{"completed, tools", nil,
			graph.StepRecord{Status: graph.StepStatusOK, ItemsTotal: 3, ItemsDone: 3, ItemsFailed: 1},
			foreachView{Total: 3, Done: 2, Failed: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := foreachView{Total: tc.step.ItemsTotal, Status: tc.step.Status}
			for _, c := range tc.children {
				f.count(c)
			}
			f.settle(tc.step)
			tc.want.Status = tc.step.Status
			require.Equal(t, tc.want, f)
		})
	}
}

// TestItemCounts: the steps table's items of a step: those that
// succeeded of all and the others, or only those that ended when the step
// does not say how many it has (never "8/0").
func TestItemCounts(t *testing.T) {
	t.Parallel()
	require.Equal(t, "1/6 done · 1 failed · 3 cancelled · 1 not started",
		itemCounts(graph.StepRecord{Status: graph.StepStatusCancelled, ItemsTotal: 6, ItemsDone: 5, ItemsFailed: 1, ItemsCancelled: 3}))
	require.Equal(t, "2/6 done", itemCounts(graph.StepRecord{ItemsTotal: 6, ItemsDone: 2}), "in flight: the rest is not counted as never started")
	require.Equal(t, "8 done", itemCounts(graph.StepRecord{Status: graph.StepStatusOK, ItemsDone: 8}))
	require.Empty(t, itemCounts(graph.StepRecord{Status: graph.StepStatusOK}))
}
