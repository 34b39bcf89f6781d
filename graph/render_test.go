package graph

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func prReview(t *testing.T) *Graph {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "pr_review.yaml"))
	require.NoError(t, err)
	return mustParse(t, string(data))
}

var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestNodes(t *testing.T) {
	t.Parallel()
	g := prReview(t)
	steps := []StepRecord{
		{Step: 1, Node: "list_changes", Kind: KindAction, Status: StepStatusOK, RoutedBy: "next", Started: at(0), Ended: at(400), Assigned: []string{"files"}, NextNode: "review_files"},
		{Step: 2, Node: "review_files", Kind: KindForeach, Started: at(400), ThreadIDs: []string{"c1", "c2", "c3", "c4"}, ItemsDone: 4, ItemsTotal: 7, ItemsFailed: 1},
	}
	rows := Nodes(g, steps, "review_files", NodeWaiting, "waiting")
	require.Len(t, rows, len(g.Order))
	want := []NodeRow{
		{Index: 1, Node: "list_changes", Kind: "action", Status: NodeCompleted, Visits: 1, LastStep: 1, DurationMS: 400, Action: "tool git/changed_files", Detail: "+files"},
		{Index: 2, Node: "review_files", Kind: "foreach", Status: NodeWaiting, Visits: 1, LastStep: 2, Action: "directive review/file", Children: "3/7 done", Detail: "1 failed"},
		{Index: 3, Node: "summarize", Kind: "action", Status: NodeNotReached, Action: "directive review/summarize"},
		{Index: 4, Node: "write_partial", Kind: "gate", Status: NodeNotReached},
	}
	require.Equal(t, want, rows[:4])
	require.Equal(t, "⏸", rows[1].Icon())
	require.Equal(t, "⏳", rows[2].Icon())

	// the JSON rows carry the fields outside tools rely on
	b, err := json.Marshal(rows[0])
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	for _, k := range []string{"node", "kind", "status", "visits"} {
		require.Contains(t, m, k)
	}
}

func TestNodesStatuses(t *testing.T) {
	t.Parallel()
	g := prReview(t)
	steps := []StepRecord{
		{Step: 1, Node: "list_changes", Status: StepStatusOK, Started: at(0), Ended: at(100)},
		{Step: 2, Node: "review_files", Status: StepStatusOK, Started: at(100), Ended: at(1100), ItemsDone: 2, ItemsTotal: 2},
		{Step: 3, Node: "summarize", Status: StepStatusRetry, RoutedBy: "retry", Started: at(1100), Ended: at(1200), Error: "tool_error: boom"},
		{Step: 4, Node: "summarize", Status: StepStatusError, RoutedBy: "on_error", Started: at(1300), Ended: at(1400), Error: "tool_error: boom again", NextNode: "write_partial"},
		{Step: 5, Node: "write_partial", Status: StepStatusOK, Started: at(1400), Ended: at(1401), Assigned: []string{"verdict"}},
		{Step: 6, Node: "list_changes", Status: StepStatusRetry, Started: at(1500), Ended: at(1600)},
		{Step: 7, Node: "list_changes", Status: StepStatusOK, Started: at(1700), Ended: at(1800)},
	}
	rows := Nodes(g, steps, "approved", NodeRunning, "running")
	byName := map[string]NodeRow{}
	for _, r := range rows {
		byName[r.Node] = r
	}
	lc := byName["list_changes"]
	require.Equal(t, 3, lc.Visits)
	require.Equal(t, 7, lc.LastStep)
	require.Equal(t, int64(300), lc.DurationMS, "duration sums the visits")
	require.True(t, lc.Retried)
	require.Equal(t, "🔁", lc.Icon())

	s := byName["summarize"]
	require.Equal(t, NodeError, s.Status)
	require.True(t, s.Routed)
	require.True(t, s.Retried)
	require.Equal(t, "↪", s.Icon())
	require.Equal(t, "tool_error: boom again", s.Detail)

	require.Equal(t, "2/2 done", byName["review_files"].Children)
	require.Equal(t, NodeRunning, byName["approved"].Status)
	require.Equal(t, "🔄", byName["approved"].Icon())

	failed := Nodes(g, []StepRecord{{Step: 1, Node: "list_changes", Status: StepStatusError, RoutedBy: "", Error: "permission_denied: no"}}, "", "", "error")
	require.Equal(t, NodeError, failed[0].Status)
	require.False(t, failed[0].Routed)
	require.Equal(t, "❌", failed[0].Icon())

	cancelled := Nodes(g, []StepRecord{{Step: 1, Node: "list_changes", Started: at(0)}}, "list_changes", NodeRunning, "cancelled")
	require.Equal(t, NodeCancelled, cancelled[0].Status)
	require.Equal(t, "⏹", cancelled[0].Icon())

	retryThenCancel := Nodes(g, []StepRecord{{Step: 1, Node: "list_changes", Status: StepStatusRetry}}, "", "", "cancelled")
	require.Equal(t, NodeCancelled, retryThenCancel[0].Status)

	// A foreach a cancel ended, read after the run was resumed (its
	// status continued): cancelled, its items told apart.
	overtaken := Nodes(g, []StepRecord{{Step: 1, Node: "review_files", Kind: KindForeach, Status: StepStatusCancelled, Started: at(0), Ended: at(900),
		ItemsDone: 5, ItemsTotal: 8, ItemsFailed: 1, ItemsCancelled: 2}}, "", "", "continued")
	rf := overtaken[1]
	require.Equal(t, NodeCancelled, rf.Status)
	require.Equal(t, "2/8 done", rf.Children)
	require.Equal(t, "1 failed; 2 cancelled; 3 not started", rf.Detail)
	require.Equal(t, int64(900), rf.DurationMS)

	// A resumed run's table: the nodes its predecessor took are taken
	// there; a node visited in both is the resumed run's.
	resumed := []StepRecord{
		{Step: 1, Node: "list_changes", Kind: KindAction, Status: StepStatusOK, Run: "r-1", Assigned: []string{"files"}},
		{Step: 2, Node: "review_files", Kind: KindForeach, Status: StepStatusCancelled, Run: "r-1", ItemsDone: 1, ItemsTotal: 2, ItemsCancelled: 1},
		{Step: 2, Node: "review_files", Kind: KindForeach, Status: StepStatusOK, ItemsDone: 2, ItemsTotal: 2},
	}
	rows = Nodes(g, resumed, "", "", "completed")
	require.Equal(t, NodeCompleted, rows[0].Status)
	require.Equal(t, "r-1", rows[0].Run)
	require.Equal(t, "+files; in run r-1", rows[0].Detail)
	require.Equal(t, NodeCompleted, rows[1].Status)
	require.Equal(t, 2, rows[1].Visits, "the cancelled visit and the resumed one")
	require.Empty(t, rows[1].Run)
	body := string(Render(g, RunInfo{RunID: "r-2", Status: "completed"}, resumed, rows))
	require.Contains(t, body, "### Step 2: review_files (foreach), cancelled in run r-1\n")
	require.Contains(t, body, "### Step 2: review_files (foreach), ok\n")
}

func TestRender(t *testing.T) {
	t.Parallel()
	g := prReview(t)
	steps := []StepRecord{
		{Step: 1, Node: "list_changes", Kind: KindAction, Status: StepStatusOK, RoutedBy: "next", Started: at(0), Ended: at(400), Assigned: []string{"files"}, NextNode: "review_files"},
		{Step: 2, Node: "review_files", Kind: KindForeach, Started: at(400), ThreadIDs: []string{"review/file-1", "review/file-2"}, ItemsDone: 4, ItemsTotal: 7, ItemsFailed: 1},
	}
	rows := Nodes(g, steps, "review_files", NodeRunning, "running")
	out := string(Render(g, RunInfo{
		RunID: "review/pr_review-1", Graph: "review/pr_review", Digest: g.Digest(), Status: "running", CurrentNode: "review_files",
		Step: 2, StartedAt: t0, Duration: 41 * time.Second, Spend: 0.125,
	}, steps, rows))

	front, body, ok := strings.Cut(strings.TrimPrefix(out, "---\n"), "\n---\n")
	require.True(t, ok, out)
	for _, line := range []string{
		`run_id: "review/pr_review-1"`,
		`graph_digest: "` + g.Digest() + `"`,
		`status: "running"`,
		"step: 2",
		`current_node: "review_files"`,
		`started_at: "2026-03-01T12:00:00Z"`,
		`duration: "41s"`,
		"spend: 0.125",
		"suppressed_errors: 0",
		`entry_type: "graph_transcript"`,
	} {
		require.Contains(t, front+"\n", line+"\n")
	}
	require.Contains(t, body, "| # | node | kind | status | visits | last step | duration | action | children | detail |")
	require.Contains(t, body, "| 1 | list_changes | action | ✅ | 1 | 1 | 0.4s | tool git/changed_files |  | +files |")
	require.Contains(t, body, "| 2 | review_files | foreach | 🔄 | 1 | 2 |  | directive review/file | 3/7 done | 1 failed |")
	require.Contains(t, body, "| 3 | summarize | action | ⏳ | 0 |  |  | directive review/summarize |  |  |")
	require.Contains(t, body, "### Step 1: list_changes (action), ok")
	require.Contains(t, body, "- next: review_files (next)")
	require.Contains(t, body, "- assigned: files")
	require.Contains(t, body, "### Step 2: review_files (foreach), in flight")
	require.Contains(t, body, "- children: review/file-1, review/file-2")
	require.Contains(t, body, "- items: 3/7 done, 1 failed")
	require.True(t, strings.HasSuffix(body, "**running** · 2 steps · 41s · $0.1250\n"), body)

	done := string(Render(g, RunInfo{RunID: "r", Status: "completed", SuppressedErrors: 2, Step: 5}, nil, Nodes(g, nil, "", "", "completed")))
	require.Contains(t, done, "No step has run yet.")
	require.Contains(t, done, "**completed (2 errors suppressed)**")
	require.Contains(t, done, "# Graph "+g.Name+": run r")
	// One is counted in the singular.
	one := string(Render(g, RunInfo{RunID: "r", Status: "completed", SuppressedErrors: 1, Step: 1}, nil, Nodes(g, nil, "", "", "completed")))
	require.Contains(t, one, "**completed (1 error suppressed)** · 1 step · ")
}

func TestRenderEscapesCells(t *testing.T) {
	t.Parallel()
	g := mustParse(t, withNodes("a: {action: {tool: t}, next: done}\ndone: {type: return}"))
	steps := []StepRecord{{Step: 1, Node: "a", Status: StepStatusError, Error: "tool_error: a | b\nsecond line"}}
	out := string(Render(g, RunInfo{RunID: "r", Status: "error"}, steps, Nodes(g, steps, "", "", "error")))
	require.Contains(t, out, `tool_error: a \| b second line |`)
	require.Contains(t, out, "- error: tool_error: a | b second line\n")
}
