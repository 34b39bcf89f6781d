package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/api"
	"github.com/spool-run/spool/client"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// TestGraphAPI drives every graph route of `spool api` through the Go
// client, holding each request and response to the OpenAPI document: a
// run (its events on the thread's SSE stream, its node table, its state
// at a step), a fork at a step with a state edit, an approval node
// approved and one denied over the thread routes, a cancel and a resume
// of a foreach whose children wait, a failed run resumed with a state
// edit, and the refusals.
func TestGraphAPI(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, nil)
	srv := startAPI(t, e)
	hc := &http.Client{Transport: newOpenAPITransport(t)}
	c, err := client.New(srv.base, client.WithHTTPClient(hc))
	require.NoError(t, err)
	raw := apiCall{t: t, hc: hc, base: srv.base}
	ctx := t.Context()

	// A run, followed on the event stream to its end.
	rec, err := c.RunGraph(ctx, api.GraphRunRequest{Graph: "g/review", Inputs: map[string]any{"topics": []string{"a", "bad", "c"}}})
	require.NoError(t, err)
	require.Equal(t, registry.KindGraph, rec.Kind)
	require.Equal(t, "g/review", rec.Directive)
	require.Equal(t, 20, rec.MaxSteps)
	id := rec.ThreadID
	s := c.Events(ctx, id, 0)
	got := readToEnd(t, s, nil)
	require.NoError(t, s.Close())
	require.Equal(t, thread.StatusCompleted, s.End().Status)
	types := map[string]int{}
	for _, ev := range got {
		types[ev.Type]++
	}
	for _, typ := range []string{transcript.TypeGraphStarted, transcript.TypeStepStarted, transcript.TypeForeachItemCompleted,
		transcript.TypeStepCompleted, transcript.TypeStateCheckpoint, transcript.TypeGraphCompleted} {
		require.Positive(t, types[typ], "%s on the stream: %v", typ, types)
	}
	require.Equal(t, 3, types[transcript.TypeForeachItemCompleted])
	requireTranscript(t, e, id, got)

	// show: the record, its node table and steps.
	run, err := c.ShowGraph(ctx, id)
	require.NoError(t, err)
	require.Equal(t, thread.StatusCompleted, run.Record.Status)
	require.Equal(t, map[string]any{"reviewed": 3.0, "failed": 1.0, "planned": 3.0}, run.Record.Outputs)
	require.Equal(t, 3, run.Record.Cost.Steps)
	require.Len(t, run.Nodes, 5)
	byNode := map[string]graph.NodeRow{}
	for _, n := range run.Nodes {
		byNode[n.Node] = n
	}
	require.Equal(t, graph.NodeCompleted, byNode["review"].Status)
	require.Equal(t, "2/3 done", byNode["review"].Children, "the items that succeeded; detail counts the failed one")
	require.Contains(t, byNode["review"].Detail, "1 failed")
	require.Equal(t, graph.NodeNotReached, byNode["sign_off"].Status)
	require.Len(t, run.Steps, 3)
	require.Len(t, run.Steps[1].ThreadIDs, 3)
	_, h, _ := raw.do(http.MethodPost, "/v1/graphs", `{"graph": "g/review", "inputs": {"topics": ["z"]}, "limits": {"max_steps": 5, "spend": 0.2}}`)
	require.Regexp(t, `^/v1/graphs/g%2Freview-\d+-\w+$`, h.Get("Location"))

	// state: after step 1, the last, and refusals.
	st, err := c.GraphState(ctx, id, 1)
	require.NoError(t, err)
	require.Equal(t, 1, st.Step)
	require.EqualValues(t, 3, st.State["planned"])
	require.NotContains(t, st.State, "reviews")
	st, err = c.GraphState(ctx, id, -1)
	require.NoError(t, err)
	require.Equal(t, 3, st.Step)
	require.Len(t, st.State["reviews"], 3)
	raw.problem(404, "step_not_recorded", "GET", "/v1/graphs/"+esc(id)+"/state?step=99", "")
	raw.problem(400, "bad_request", "GET", "/v1/graphs/"+esc(id)+"/state?step=x", "")

	// fork at step 1, with a state edit: a new run beside it.
	fork, err := c.ForkGraph(ctx, id, api.GraphForkRequest{AtStep: 1, Set: map[string]any{"planned": 9}})
	require.NoError(t, err)
	require.Equal(t, id, fork.ForkedFrom)
	require.Equal(t, 1, fork.ForkTurn)
	require.Equal(t, registry.KindGraph, fork.Kind)
	f := e.Wait([]string{fork.ThreadID}, 2*time.Minute)[fork.ThreadID]
	require.Equal(t, thread.StatusCompleted, f.Status, "%+v", f.Error)
	require.Equal(t, map[string]any{"reviewed": 3.0, "failed": 1.0, "planned": 9.0}, f.Outputs)
	tree, err := c.Tree(ctx, id)
	require.NoError(t, err)
	require.Equal(t, registry.KindGraph, tree.Kind)
	require.Len(t, tree.Children, 3, "the run's children")
	require.Len(t, tree.Forks, 1)
	require.Equal(t, fork.ThreadID, tree.Forks[0].ThreadID)
	require.Len(t, tree.Forks[0].Children, 3, "the fork ran the foreach again")
	raw.problem(422, "step_not_recorded", "POST", "/v1/graphs/"+esc(id)+"/fork", `{"at_step": 42}`)
	raw.problem(400, "bad_request", "POST", "/v1/graphs/"+esc(id)+"/fork", `{"at_step": 0}`)
	raw.problem(422, "graph_invalid", "POST", "/v1/graphs/"+esc(id)+"/fork", `{"at_step": 1, "from": "nowhere"}`)
	raw.problem(422, "graph_invalid", "POST", "/v1/graphs/"+esc(id)+"/fork", `{"at_step": 1, "set": {"_errors": []}}`)
	raw.problem(409, "not_resumable", "POST", "/v1/graphs/"+esc(id)+"/resume", `{}`)

	// An approval node, decided with the thread routes: approved, and
	// denied (a denial is a result the graph routes on).
	approval := func(topic string) string {
		rec, err := c.RunGraph(ctx, api.GraphRunRequest{Graph: "g/review", Inputs: map[string]any{"topics": []string{topic}, "sign_off": true}})
		require.NoError(t, err)
		r := waitRecord(t, e, rec.ThreadID, "waits for approval", func(r *registry.Record) bool {
			return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForApproval
		})
		require.Len(t, r.PendingApprovals, 1)
		require.Equal(t, "graph:approval", r.PendingApprovals[0].Tool)
		require.JSONEq(t, `{"prompt": "Ship the 1 reviews?", "show": {"failed": 0}}`, string(r.PendingApprovals[0].Input))
		return rec.ThreadID
	}
	yes, no := approval("x"), approval("y")
	// The lists give a waiting run's spend as its show does: its
	// subtree's, live (its child spent).
	shown, err := c.ShowGraph(ctx, yes)
	require.NoError(t, err)
	require.Positive(t, shown.Record.Cost.Spend)
	listed, err := c.List(ctx, client.ListOptions{Directive: "g/review"})
	require.NoError(t, err)
	i := slices.IndexFunc(listed, func(r *registry.Record) bool { return r.ThreadID == yes })
	require.GreaterOrEqual(t, i, 0)
	require.InDelta(t, shown.Record.Cost.Spend, listed[i].Cost.Spend, 1e-9, "GET /v1/threads")
	var graphs []registry.Record
	code, _, body := raw.do(http.MethodGet, "/v1/graphs?graph=g/review", "")
	require.Equal(t, http.StatusOK, code, string(body))
	require.NoError(t, json.Unmarshal(body, &graphs))
	i = slices.IndexFunc(graphs, func(r registry.Record) bool { return r.ThreadID == yes })
	require.GreaterOrEqual(t, i, 0)
	require.InDelta(t, shown.Record.Cost.Spend, graphs[i].Cost.Spend, 1e-9, "GET /v1/graphs")
	require.NoError(t, c.Approve(ctx, yes, api.ApproveRequest{Reason: "looks fine", By: "ada"}))
	require.NoError(t, c.Deny(ctx, no, api.DenyRequest{Reason: "not now", By: "bo"}))
	done := e.Wait([]string{yes, no}, 2*time.Minute)
	require.Equal(t, map[string]any{"reviewed": 1.0, "failed": 0.0, "planned": 1.0}, done[yes].Outputs)
	require.Equal(t, map[string]any{"rejected": true}, done[no].Outputs)
	st, err = c.GraphState(ctx, no, -1)
	require.NoError(t, err)
	require.NotContains(t, st.State, "_last_error", "a denial is a result, not an error")

	// cancel a foreach whose children wait, then resume it.
	gate, release := gateFile(t)
	held, err := c.RunGraph(ctx, api.GraphRunRequest{Graph: "g/hold", Inputs: map[string]any{"items": []string{"a", "b"}, "gate": gate}})
	require.NoError(t, err)
	waitRecord(t, e, held.ThreadID, "waits on its children", holding)
	cr, err := c.CancelGraph(ctx, held.ThreadID, true)
	require.NoError(t, err)
	require.True(t, cr.CancelRequested)
	require.Equal(t, thread.StatusCancelled, e.Wait([]string{held.ThreadID}, 2*time.Minute)[held.ThreadID].Status)
	kids, err := e.Orch.Children(ctx, held.ThreadID)
	require.NoError(t, err)
	require.Len(t, kids, 2)
	for _, k := range kids {
		waitRecord(t, e, k.ThreadID, "cancelled by the cascade", func(r *registry.Record) bool { return r.Status == thread.StatusCancelled })
	}
	res, err := c.ResumeGraph(ctx, held.ThreadID, api.GraphResumeRequest{})
	require.NoError(t, err)
	require.Equal(t, held.ThreadID, res.OldThreadID)
	release()
	final := e.Wait([]string{held.ThreadID}, 2*time.Minute)[held.ThreadID] // follows the chain
	require.Equal(t, res.NewThreadID, final.ThreadID)
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, map[string]any{"held": 2.0}, final.Outputs)

	// A failed run, resumed with a state edit: the failed step runs again.
	broken, err := c.RunGraph(ctx, api.GraphRunRequest{Graph: "g/broken"})
	require.NoError(t, err)
	b := e.Wait([]string{broken.ThreadID}, 2*time.Minute)[broken.ThreadID]
	require.Equal(t, thread.StatusError, b.Status)
	require.Equal(t, "node_error", b.Error.Code)
	require.Contains(t, b.Error.Message, "read: ")
	raw.problem(422, "graph_invalid", "POST", "/v1/graphs/"+esc(broken.ThreadID)+"/resume", `{"from": "nowhere"}`)
	res, err = c.ResumeGraph(ctx, broken.ThreadID, api.GraphResumeRequest{Set: map[string]any{"path": "notes.md"}})
	require.NoError(t, err)
	final = e.Wait([]string{res.NewThreadID}, 2*time.Minute)[res.NewThreadID]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	require.Equal(t, map[string]any{"text": "notes"}, final.Outputs)

	// Refusals.
	raw.problem(400, "bad_request", "POST", "/v1/graphs", `{}`)
	raw.problem(400, "bad_request", "POST", "/v1/graphs", `{"graph": "../x"}`)
	raw.problem(400, "bad_request", "POST", "/v1/graphs", `{"graph": "g/review", "limits": {"max_steps": 0}}`)
	raw.problem(400, "bad_request", "POST", "/v1/graphs", `{"graph": "g/review", "directive": "x"}`)
	raw.problem(422, "graph_not_found", "POST", "/v1/graphs", `{"graph": "g/nope"}`)
	p := raw.problem(422, "refused", "POST", "/v1/graphs", `{"graph": "g/review", "inputs": {"topics": "one"}}`)
	require.Contains(t, p.Detail, "topics")
	require.Contains(t, docText(t, "graphs.md"), "the API answers 422 with the problem code `refused`", "docs/graphs.md says what the API answers")
	raw.problem(400, "bad_request", "POST", "/v1/graphs", `{"graph": "g/review", "inputs": `)
	raw.problem(404, "not_found", "GET", "/v1/graphs/g%2Fnope-1-aa", "")
	thr, err := c.Run(ctx, api.RunRequest{Directive: "g/topic", Inputs: map[string]any{"topic": "t"}})
	require.NoError(t, err)
	raw.problem(404, "not_graph", "GET", "/v1/graphs/"+esc(thr.ThreadID), "")
	raw.problem(404, "not_graph", "POST", "/v1/graphs/"+esc(thr.ThreadID)+"/fork", `{"at_step": 1}`)
	e.Wait([]string{thr.ThreadID}, 2*time.Minute)
}

// docText is docs/NAME's text with its line breaks and runs of spaces as
// single spaces, for a test to hold what the docs say to what is.
func docText(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "docs", name))
	require.NoError(t, err)
	return strings.Join(strings.Fields(string(b)), " ")
}
