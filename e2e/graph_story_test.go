package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/internal/testing/spooltest"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// graphShown is what `spool graph show --json` prints of a run's node
// table and steps.
type graphShown struct {
	Record registry.Record    `json:"-"`
	Nodes  []graph.NodeRow    `json:"nodes"`
	Steps  []graph.StepRecord `json:"steps"`
}

// graphJSON runs `spool graph show RUN --json` and decodes it, with the
// raw text.
func graphJSON(t *testing.T, e *spooltest.Env, id string) (graphShown, string) {
	t.Helper()
	res := e.Spool("graph", "show", id, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var v graphShown
	res.JSON(t, &v)
	res.JSON(t, &v.Record)
	return v, res.Stdout
}

// nodeRow is the row of node in v.
func nodeRow(t *testing.T, v graphShown, node string) graph.NodeRow {
	t.Helper()
	for _, r := range v.Nodes {
		if r.Node == node {
			return r
		}
	}
	t.Fatalf("no row of node %s in %+v", node, v.Nodes)
	return graph.NodeRow{}
}

// TestGraphCancelledForeach: a run cancelled while two of its four
// foreach items run (two never started) shows the foreach step as
// cancelled, with when it ended and its items told apart (none done, two
// cancelled, two not started) on `graph show` (text and JSON) and the
// API, and no zero time anywhere; after a resume the old run, now
// continued, still shows the step cancelled, not in flight. `graph run
// --wait --follow` follows the foreach as it runs and as it ends.
func TestGraphCancelledForeach(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, nil)
	srv := startAPI(t, e)
	gate, release := gateFile(t)
	run := e.Start(nil, "graph", "run", "g/hold", "--inputs-json", `{"items": ["a", "b", "c", "d"], "gate": "`+gate+`"}`, "--wait", "--follow", "--timeout", "3m")
	require.Eventually(t, func() bool { return strings.Contains(run.Log(), "] created") }, 2*time.Minute, 50*time.Millisecond, "%s", run.Log())
	id := idIn(t, run.Log(), "g/hold-")
	waitRecord(t, e, id, "holds two children", func(r *registry.Record) bool {
		return holding(r) && len(children(t, e, id)) == 2
	})
	// --follow follows the foreach: its node, step, items and children.
	follow := "[" + id + "] waiting   node fan (step 1 of 100) · waiting for children · items 0 of 4 settled · 2 children: 2 running · $"
	require.Eventually(t, func() bool { return strings.Contains(run.Log(), follow) }, time.Minute, 50*time.Millisecond, "%s", run.Log())
	res := e.Spool("graph", "cancel", id)
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, thread.StatusCancelled, e.Wait([]string{id}, 2*time.Minute)[id].Status)
	require.Eventually(t, run.Exited, time.Minute, 50*time.Millisecond)
	require.Equal(t, 1, run.Cmd.ProcessState.ExitCode(), run.Log())
	require.Contains(t, run.Log(), "["+id+"] cancelled 0 steps · stopped at node fan · 2 children: ", "%s", run.Log())
	require.NotContains(t, run.Log(), "items      0 of 4", "a run that ended has no items in flight")

	checkCancelled := func(id string) {
		t.Helper()
		v, raw := graphJSON(t, e, id)
		require.NotContains(t, raw, "0001-01-01", "no zero time is printed")
		require.Len(t, v.Steps, 1, raw)
		s := v.Steps[0]
		require.Equal(t, graph.StepStatusCancelled, s.Status, "%+v", s)
		require.False(t, s.Ended.IsZero(), "a cancelled step has ended")
		require.False(t, s.Ended.Before(s.Started))
		require.Equal(t, 4, s.ItemsTotal, "%+v", s)
		require.Equal(t, 2, s.ItemsDone, "the two children the cancel stopped ended")
		require.Equal(t, 2, s.ItemsCancelled, "%+v", s)
		require.Zero(t, s.ItemsFailed, "cancelled items are not failed ones")
		require.Equal(t, 2, s.ItemsNotStarted())
		fan := nodeRow(t, v, "fan")
		require.Equal(t, graph.NodeCancelled, fan.Status)
		require.Equal(t, "0/4 done", fan.Children)
		require.Equal(t, "2 cancelled; 2 not started", fan.Detail)
		text := e.Spool("graph", "show", id)
		require.Equal(t, 0, text.Code, text.Stderr)
		require.Regexp(t, `fan\s+foreach\s+⏹ cancelled\s+1\s+1\s+directive g/waiter\s+0/4 done\s+2 cancelled; 2 not started`, text.Stdout)
	}
	checkCancelled(id)

	// The API answers the same step.
	resp, err := http.Get(srv.base + "/v1/graphs/" + esc(id))
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.NotContains(t, string(body), "0001-01-01")
	var api graphShown
	require.NoError(t, json.Unmarshal(body, &api), string(body))
	require.Equal(t, graph.StepStatusCancelled, api.Steps[0].Status)
	require.Equal(t, 2, api.Steps[0].ItemsCancelled)

	// Resumed (and waited for, followed), the old run is continued: its
	// step stays cancelled.
	release()
	res = e.Spool("graph", "resume", id, "--wait", "--follow", "--timeout", "2m")
	require.Equal(t, 0, res.Code, res.Stdout+res.Stderr)
	newID := idIn(t, strings.TrimPrefix(res.Stderr, "spool: resumed "+id), "g/hold-")
	require.Contains(t, res.Stderr, "spool: resumed "+id+" as "+newID+"\n")
	require.Contains(t, res.Stderr, "["+newID+" (resume 1)] completed ", "--follow follows the new run to its end, named as a resume")
	require.Contains(t, res.Stdout, "run        "+newID+"\n")
	require.Contains(t, res.Stdout, "status     completed\n")
	final := e.Wait([]string{id}, 2*time.Minute)[id]
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)
	old, err := e.Orch.Record(t.Context(), id)
	require.NoError(t, err)
	require.Equal(t, thread.StatusContinued, old.Status)
	checkCancelled(id)
}

// idIn is the first run or thread id after prefix in s.
func idIn(t *testing.T, s, prefix string) string {
	t.Helper()
	m := regexp.MustCompile(regexp.QuoteMeta(prefix) + `\d+-[a-z0-9]+`).FindString(s)
	require.NotEmpty(t, m, "no %s… in %s", prefix, s)
	return m
}

// TestGraphWaitSaysWhatItWaitsFor: `graph run --wait --follow` at an
// approval node says what it waits for and how to go on, and follows the
// run as a graph run (its node, step and items, no turns); approved, it
// goes on to its end. A fork's --wait says so too, and a wait that runs
// out of time names the decision it waits on; so does a thread's wait on
// a gated tool call.
func TestGraphWaitSaysWhatItWaitsFor(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, nil)
	run := e.Start(nil, "graph", "run", "g/review", "--inputs-json", `{"topics": ["a", "b"], "sign_off": true}`, "--wait", "--follow", "--timeout", "3m")
	var id string
	require.Eventually(t, func() bool {
		return strings.Contains(run.Log(), "spool: waiting for approval at node sign_off: spool thread approve ")
	}, 2*time.Minute, 50*time.Millisecond, "%s", run.Log())
	id = idIn(t, run.Log(), "g/review-")
	require.Contains(t, run.Log(), "spool: waiting for approval at node sign_off: spool thread approve "+id+" (or spool thread deny "+id+" --reason TEXT)\n")
	require.Eventually(t, func() bool {
		return strings.Contains(run.Log(), "["+id+"] waiting   node sign_off (step 3 of 20) · waiting for approval · ")
	}, time.Minute, 50*time.Millisecond, "the follow line, after the message: %s", run.Log())
	require.NotContains(t, run.Log(), "turn 0/", "a graph run has no turns")
	requireRunWaitsWorded(t, e, id)
	ap := e.Spool("thread", "approve", id)
	require.Equal(t, 0, ap.Code, ap.Stderr)
	require.Equal(t, id+"  approved at node sign_off; the run goes on\n", ap.Stdout)
	require.Eventually(t, run.Exited, 2*time.Minute, 50*time.Millisecond)
	require.Equal(t, 0, run.Cmd.ProcessState.ExitCode(), run.Log())
	require.Contains(t, run.Log(), "["+id+"] completed 4 steps · ")
	require.Equal(t, 1, strings.Count(run.Log(), "spool: waiting for approval"), "said once")

	// A fork at the step before the approval waits at it too: its wait
	// says so, and when it runs out of time, says what it waited for.
	fork := e.Spool("graph", "fork", id, "--at-step", "2", "--wait", "--timeout", "10s")
	require.Equal(t, 1, fork.Code, fork.Stdout+fork.Stderr)
	fid := idIn(t, fork.Stderr, "g/review-")
	require.NotEqual(t, id, fid)
	require.Contains(t, fork.Stderr, "spool: waiting for approval at node sign_off: spool thread approve "+fid)
	require.Contains(t, fork.Stderr, "spool: run "+fid+" not finished after --timeout 10s; it is waiting for approval at node sign_off: spool thread approve "+fid+" (or spool thread deny "+fid+" --reason TEXT)\n")
	res := e.Spool("thread", "deny", fid)
	require.Equal(t, 2, res.Code, res.Stdout+res.Stderr)
	require.Contains(t, res.Stderr, "thread deny needs --reason TEXT (a thread's model gets it as the call's error; a graph run's approval node, in result.reason)")
	res = e.Spool("thread", "deny", fid, "--reason", "no")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Equal(t, fid+"  denied at node sign_off; the run goes on, routing on the denial (its reason in result.reason)\n", res.Stdout)
	tree := e.Spool("thread", "tree", id)
	require.Equal(t, 0, tree.Code, tree.Stderr)
	require.Regexp(t, `^`+regexp.QuoteMeta(id)+`  completed  graph  4 steps  \$0\.\d{6} of \$0\.\d{6} with its children\n`, tree.Stdout,
		"a graph run's spend is its subtree's")
	require.NotRegexp(t, `\b1 (turns|steps)\b`, tree.Stdout)

	// A thread waiting on a gated tool call.
	p := spooltest.New(t, spooltest.Options{Files: peopleProject()})
	p.StartWorker("--concurrency", "2")
	th := p.Spool("thread", "run", "p/write", "--model", "script:scripts/p.yaml", "--wait", "--timeout", "10s")
	require.Equal(t, 1, th.Code, th.Stdout+th.Stderr)
	tid := idIn(t, th.Stderr, "p/write-")
	require.Contains(t, th.Stderr, "spool: waiting for approval of tool rye/file-system/fs_write: spool thread approve "+tid+" (or spool thread deny "+tid+" --reason TEXT)\n")
	require.Contains(t, th.Stderr, "spool: thread "+tid+" not finished after --timeout 10s; it is waiting for approval of tool rye/file-system/fs_write: spool thread approve "+tid)
	res = p.Spool("thread", "deny", tid, "--reason", "no")
	require.Equal(t, 0, res.Code, res.Stderr)
	require.Regexp(t, `^`+regexp.QuoteMeta(tid)+`  denied \S+; the thread goes on\n$`, res.Stdout)
}

// requireRunWaitsWorded: what the CLI says of run id, waiting at its
// approval node sign_off, speaks of the run and its node, shows the
// node's prompt and show as text (no JSON), and its lists give the run's
// spend as its subtree's (its children's, live), under a header.
func requireRunWaitsWorded(t *testing.T, e *spooltest.Env, id string) {
	t.Helper()
	aps := e.Spool("thread", "approvals")
	require.Equal(t, 0, aps.Code, aps.Stderr)
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(id)+`  approval at node sign_off \(step \d+\)  waiting \d+s\n  asks: Ship the 2 reviews\?\n  failed: 0\n`, aps.Stdout)
	require.NotContains(t, aps.Stdout, `"prompt"`)
	for _, show := range [][]string{{"thread", "show", id}, {"graph", "show", id}} {
		res := e.Spool(show...)
		require.Equal(t, 0, res.Code, res.Stderr)
		require.Contains(t, res.Stdout, "waiting    for approval at node sign_off: spool thread approve "+id+" (or spool thread deny "+id+
			" --reason TEXT)\nasks       Ship the 2 reviews?\n", show)
	}
	var shown registry.Record
	res := e.Spool("graph", "show", id, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	res.JSON(t, &shown)
	require.Positive(t, shown.Cost.Spend, "the children spent")
	spend := regexp.QuoteMeta(fmt.Sprintf("$%.6f", shown.Cost.Spend))
	gl := e.Spool("graph", "list", "--graph", "g/review")
	require.Equal(t, 0, gl.Code, gl.Stderr)
	require.Regexp(t, `^RUN +STATUS +NODE +STEPS +SPEND\n`, gl.Stdout)
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(id)+` +waiting +sign_off +\d+ steps +`+spend+`$`, gl.Stdout)
	tl := e.Spool("thread", "list", "--directive", "g/review")
	require.Equal(t, 0, tl.Code, tl.Stderr)
	require.Regexp(t, `^ID +STATUS +PROGRESS +SPEND\n`, tl.Stdout)
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(id)+` +waiting +graph, \d+ steps +`+spend+`$`, tl.Stdout)
	for _, list := range [][]string{{"graph", "list", "--graph", "g/review", "--json"}, {"thread", "list", "--directive", "g/review", "--json"}} {
		var recs []registry.Record
		res := e.Spool(list...)
		require.Equal(t, 0, res.Code, res.Stderr)
		if list[0] == "thread" {
			recs = listedThreads(t, res)
		} else {
			res.JSON(t, &recs)
		}
		i := slices.IndexFunc(recs, func(r registry.Record) bool { return r.ThreadID == id })
		require.GreaterOrEqual(t, i, 0, list)
		require.InDelta(t, shown.Cost.Spend, recs[i].Cost.Spend, 1e-9, "%v gives the run's spend as graph show does", list)
	}
}

// TestGraphResumedStory: a run cancelled at its approval node and resumed
// reads as one story. The resumed run's node table shows the nodes its
// predecessor took as taken there (not not_reached), its steps name the
// run each ran in, its spend and limit are both the chain's, and each run
// names the other; `graph resume --json` names the new run as a start and
// a fork do (thread_id, run), keeping new_thread_id; a fork of the
// resumed run at a step its predecessor took forks that one, and `graph
// state` at that step reads it there.
func TestGraphResumedStory(t *testing.T) {
	t.Parallel()
	e := graphEnv(t, nil)
	res := e.Spool("graph", "run", "g/review", "--inputs-json", `{"topics": ["a", "b"], "sign_off": true}`, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var first registry.Record
	res.JSON(t, &first)
	old := first.ThreadID
	waitRecord(t, e, old, "waits for approval", func(r *registry.Record) bool {
		return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForApproval
	})
	res = e.Spool("graph", "cancel", old)
	require.Equal(t, 0, res.Code, res.Stderr)
	cancelled := e.Wait([]string{old}, 2*time.Minute)[old]
	require.Equal(t, thread.StatusCancelled, cancelled.Status)
	spent, err := e.Orch.SubtreeSpend(t.Context(), cancelled)
	require.NoError(t, err)
	require.Positive(t, spent, "its children spent")
	require.InDelta(t, spent, cancelled.Cost.Spend, 1e-9, "a run cancelled while it waits holds its subtree's spend, as one its worker ends does")

	res = e.Spool("graph", "resume", old, "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var resumed struct {
		ThreadID    string          `json:"thread_id"`
		NewThreadID string          `json:"new_thread_id"`
		Run         registry.Record `json:"run"`
	}
	res.JSON(t, &resumed)
	id := resumed.ThreadID
	require.NotEqual(t, old, id)
	require.Equal(t, id, resumed.NewThreadID, "the old name stays")
	require.Equal(t, id, resumed.Run.ThreadID)
	waitRecord(t, e, id, "waits for approval again", func(r *registry.Record) bool {
		return r.Status == thread.StatusWaiting && r.WaitingFor == registry.WaitingForApproval
	})
	res = e.Spool("thread", "approve", id)
	require.Equal(t, 0, res.Code, res.Stderr)
	final := e.Wait([]string{old}, 2*time.Minute)[old]
	require.Equal(t, id, final.ThreadID)
	require.Equal(t, thread.StatusCompleted, final.Status, "%+v", final.Error)

	v, raw := graphJSON(t, e, id)
	for _, node := range []string{"plan", "review"} {
		r := nodeRow(t, v, node)
		require.Equal(t, graph.NodeCompleted, r.Status, "%s: %s", node, raw)
		require.Equal(t, old, r.Run, "%s ran in the run it resumed", node)
	}
	so := nodeRow(t, v, "sign_off")
	require.Equal(t, graph.NodeCompleted, so.Status)
	require.Empty(t, so.Run)
	require.Equal(t, 2, so.Visits, "cancelled in the first run, approved in this one")
	require.Equal(t, graph.NodeNotReached, nodeRow(t, v, "rejected").Status)
	var runs []string
	for _, s := range v.Steps {
		runs = append(runs, fmt.Sprintf("%d %s %s %s", s.Step, s.Node, s.Status, s.Run))
	}
	require.Equal(t, []string{"1 plan ok " + old, "2 review ok " + old, "3 sign_off cancelled " + old, "3 sign_off ok ", "4 done ok "}, runs)

	text := e.Spool("graph", "show", id)
	require.Equal(t, 0, text.Code, text.Stderr)
	require.Contains(t, text.Stdout, "resumes    "+old+"\n")
	require.Regexp(t, `spend      \$0\.\d+ of \$0\.5 \(this run, the runs it resumed and their children\)\n`, text.Stdout)
	require.Regexp(t, `plan\s+action\s+✅ completed\s+1\s+1\s+tool rye/file-system/fs_write\s+\+planned; in run `+regexp.QuoteMeta(old), text.Stdout)
	oldText := e.Spool("graph", "show", old)
	require.Equal(t, 0, oldText.Code, oldText.Stderr)
	require.Contains(t, oldText.Stdout, "status     continued\n")
	require.Contains(t, oldText.Stdout, "resumed as "+id+"\n")
	require.Contains(t, oldText.Stdout, "of $0.5 (the run and its children)\n")
	require.Regexp(t, `sign_off\s+approval\s+⏹ cancelled`, oldText.Stdout)

	// Step 1 is the first run's: a fork of the resumed run there forks
	// it, and the state after it is read there.
	res = e.Spool("graph", "fork", id, "--at-step", "1", "--json")
	require.Equal(t, 0, res.Code, res.Stderr)
	var fork struct {
		ForkedFrom string          `json:"forked_from"`
		ForkStep   int             `json:"fork_step"`
		Run        registry.Record `json:"run"`
	}
	res.JSON(t, &fork)
	require.Equal(t, old, fork.ForkedFrom)
	require.Equal(t, 1, fork.ForkStep)
	res = e.Spool("thread", "cancel", fork.Run.ThreadID)
	require.Equal(t, 0, res.Code, res.Stderr)
	st := e.Spool("graph", "state", id, "--step", "1", "--json")
	require.Equal(t, 0, st.Code, st.Stderr)
	require.Contains(t, st.Stdout, `"planned": 2`)
	res = e.Spool("graph", "fork", id, "--at-step", "9")
	require.Equal(t, 2, res.Code, res.Stdout+res.Stderr)
	require.Contains(t, res.Stderr, "run "+id+" took 4 steps: there is no completed step 9")
}
