package monitor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// A graph run's page (/threads/RUN for a record of kind graph): the
// thread page's head, actions, record, budget and tree, and what only a
// run has: the diagram of its pinned definition with the node in flight,
// the nodes it visited and the edges it took (graph_diagram.go); its node
// table; a progress bar of each foreach (settled, running, failed and
// not started items, each child linked); its steps, each with a link to
// the state after it and a fork from there; the state after any step.
// It is read from the transcript cache, as the transcript page is (the
// node table as `spool graph show` builds it, without storing a render),
// and refreshed as a whole while the tree runs, as the thread page is.
// An approval node's pending call ("graph:approval") has the approve and
// deny forms of any pending call; resume and fork confirm first, as
// cancel does.

func init() {
	funcs["stepDur"] = stepDur
	funcs["itemCounts"] = itemCounts
}

// stepDur is a step's duration, rounded as people read it ("" for none).
func stepDur(d time.Duration) string {
	switch {
	case d <= 0:
		return ""
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// maxForeachChildren bounds the children a foreach's progress reads.
const maxForeachChildren = 200

// graphPage is the graph run page.
type graphPage struct {
	threadPage
	Diagram  template.HTML
	Nodes    []graph.NodeRow
	Steps    []graph.StepRecord
	Foreach  []foreachView
	State    stateView
	Graph    *graph.Graph
	Warnings []string
	// Forks: the steps a fork may start after (their checkpoints).
	Forkable map[int]bool
}

// foreachView is a foreach's (or a wait's) progress at its last visit.
type foreachView struct {
	Node    string
	Step    int
	Current bool
	// Status is the step's once it ended (ok, error, cancelled).
	Status    string
	Total     int
	Done      int // completed
	Failed    int // error, or refused
	Cancelled int // cancelled (a cancel of the run stops its running children)
	Running   int // started, not ended
	Paused    int // of Running: paused (holding no worker slot)
	// Pending have not started yet (and, once the step ended, never will).
	Pending  int
	Children []childView
	// More counts children not listed (maxForeachChildren).
	More int
}

// Pct is the share of the total n is, for the bar's widths.
func (f foreachView) Pct(n int) string {
	if f.Total <= 0 {
		return "0"
	}
	return fmt.Sprintf("%.2f", float64(n)/float64(f.Total)*100)
}

// Offset is where the segment after the first n items starts.
func (f foreachView) Offset(ns ...int) string {
	s := 0
	for _, n := range ns {
		s += n
	}
	return f.Pct(s)
}

// childView is a child of a foreach: its status, or "planned" for an id
// the step planned and has not started yet.
type childView struct {
	Index    int
	ThreadID string
	Status   thread.Status
}

// stateView is the state after a step.
type stateView struct {
	Step   int // -1: none
	JSON   string
	Err    string
	Steps  []int // steps with a state to show
	Chosen bool  // a ?step= chose it
}

func (m *Monitor) serveGraph(w http.ResponseWriter, r *http.Request, p threadPage) {
	ctx := r.Context()
	rec := p.Thread
	gp := graphPage{threadPage: p, Forkable: map[int]bool{}}
	proj, err := m.cfg.Orch.Project(ctx, rec.Bundle)
	if err == nil {
		gp.Graph, err = proj.Graph(rec.Directive)
	}
	if err != nil {
		gp.Warnings = append(gp.Warnings, "the run's graph does not load: "+err.Error())
	}
	evs, bad, err := m.transcripts.read(ctx, rec.ThreadID)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if bad != nil {
		gp.Warnings = append(gp.Warnings, "the transcript stops short: "+bad.Error())
	}
	gp.Steps = orchestrator.InFlight(orchestrator.GraphSteps(evs), rec)
	current := ""
	if gp.Graph != nil {
		cs := ""
		if !rec.Status.Terminal() {
			current, cs = rec.CurrentNode, graph.NodeRunning
			if rec.Status == thread.StatusWaiting || rec.Status == thread.StatusPaused {
				cs = graph.NodeWaiting // a paused run's node, as graph show has it
			}
		}
		gp.Nodes = graph.Nodes(gp.Graph, gp.Steps, current, cs, string(rec.Status))
		if rec.Status == thread.StatusPaused {
			markPaused(gp.Nodes, current)
		}
		gp.Diagram = renderDiagram(gp.Graph, gp.Nodes, gp.Steps, current)
	}
	gp.Foreach = m.foreachViews(ctx, rec, gp.Graph, gp.Steps, current)
	gp.State = m.graphStateView(ctx, rec, evs, r.URL.Query().Get("step"))
	for _, s := range gp.State.Steps {
		if s >= 1 {
			gp.Forkable[s] = true
		}
	}
	title := rec.Directive + " · graph · " + string(rec.Status)
	m.render(w, r, http.StatusOK, m.pages.graph, page{Title: title, Data: gp})
}

// foreachViews are the progress of each foreach and wait node at its
// last visit, the children's statuses read from the registry.
func (m *Monitor) foreachViews(ctx context.Context, rec *spooltype.Record, g *graph.Graph, steps []graph.StepRecord, current string) []foreachView {
	order, last := lastFanouts(g, steps)
	var out []foreachView
	for _, name := range order {
		s := last[name]
		f := foreachView{Node: name, Step: s.Step, Current: s.Status == "" && name == current && !rec.Status.Terminal(), Status: s.Status, Total: s.ItemsTotal}
		if f.Current && rec.ItemsTotal > 0 {
			f.Total = rec.ItemsTotal
		}
		for i, id := range s.ThreadIDs {
			if i >= maxForeachChildren {
				f.More = len(s.ThreadIDs) - i
				break
			}
			c := childView{Index: i, ThreadID: id, Status: m.childStatus(ctx, id)}
			f.count(c.Status)
			f.Children = append(f.Children, c)
		}
		f.settle(s)
		out = append(out, f)
	}
	return out
}

// lastFanouts are the foreach and wait nodes among steps, in the order of
// their first visit, and the step of each one's last visit. A node's kind
// is the definition's, or, without one, the one its step recorded.
func lastFanouts(g *graph.Graph, steps []graph.StepRecord) ([]string, map[string]graph.StepRecord) {
	last := map[string]graph.StepRecord{}
	var order []string
	for _, s := range steps {
		if g != nil {
			if n := g.Node(s.Node); n == nil || n.Kind != graph.KindForeach && n.Kind != graph.KindWait {
				continue
			}
		} else if s.Kind != graph.KindForeach && s.Kind != graph.KindWait {
			continue
		}
		if _, ok := last[s.Node]; !ok {
			order = append(order, s.Node)
		}
		last[s.Node] = s
	}
	return order, last
}

// childStatus is the status of the child id as the registry holds it, its
// chain's latest thread's for a child that continued, and "planned" for a
// planned child not registered yet: it has not started.
func (m *Monitor) childStatus(ctx context.Context, id string) thread.Status {
	cr, err := m.cfg.Orch.Record(ctx, id)
	if err != nil {
		return "planned"
	}
	if cr.Status == thread.StatusContinued {
		if lr, err := m.cfg.Orch.Latest(ctx, id); err == nil {
			return lr.Status
		}
	}
	return cr.Status
}

// count counts a child of status as done, failed, cancelled or running;
// a planned child is none of them.
func (f *foreachView) count(status thread.Status) {
	switch status {
	case thread.StatusCompleted:
		f.Done++
	case thread.StatusError:
		f.Failed++
	case thread.StatusCancelled:
		f.Cancelled++
	case "planned":
	case thread.StatusPaused:
		f.Running++
		f.Paused++
	default:
		f.Running++
	}
}

// settle makes the counts of the children agree with what step s says
// and is the total, so that they add up to it with what is still pending:
// a foreach of tools (no children) settles its items together, and an
// ended step's own counts win (a refused start has no child; a stopped
// foreach has items that never started). A child still running when its
// step was cancelled or failed is being cancelled with it.
func (f *foreachView) settle(s graph.StepRecord) {
	if len(s.ThreadIDs) == 0 {
		f.Done, f.Failed, f.Cancelled = s.ItemsSucceeded(), s.ItemsFailed, s.ItemsCancelled
	}
	if s.Status != "" && s.ItemsTotal > 0 {
		if s.Status == graph.StepStatusCancelled || s.Status == graph.StepStatusError {
			f.Cancelled += f.Running
		}
		f.Running, f.Paused = 0, 0
		f.Failed = max(f.Failed, s.ItemsFailed)
		f.Cancelled = min(max(f.Cancelled, s.ItemsCancelled), s.ItemsTotal-f.Failed)
		f.Done = min(f.Done, s.ItemsTotal-f.Failed-f.Cancelled)
	}
	f.Total = max(f.Total, f.Done+f.Failed+f.Cancelled+f.Running)
	f.Pending = f.Total - f.Done - f.Failed - f.Cancelled - f.Running
}

// itemCounts is a step's items as the steps table shows them: those that
// succeeded of all ("3/8 done"), then those that failed, were cancelled
// or never started, when there are any; "5 done" when the step does not
// say how many items it has.
func itemCounts(s graph.StepRecord) string {
	if s.ItemsTotal == 0 {
		if s.ItemsDone == 0 {
			return ""
		}
		return fmt.Sprintf("%d done", s.ItemsSucceeded())
	}
	out := fmt.Sprintf("%d/%d done", s.ItemsSucceeded(), s.ItemsTotal)
	for _, c := range []struct {
		n    int
		what string
	}{{s.ItemsFailed, "failed"}, {s.ItemsCancelled, "cancelled"}, {s.ItemsNotStarted(), "not started"}} {
		if c.n > 0 {
			out += fmt.Sprintf(" · %d %s", c.n, c.what)
		}
	}
	return out
}

// snapshots caches state snapshots by content address: they never change.
var snapshots = struct {
	sync.Mutex
	m map[string][]byte
}{m: map[string][]byte{}}

// graphStateView is the state after the step the page asks for (the last
// checkpoint's by default), read from its content-addressed snapshot,
// which must hash to the address the verified checkpoint names.
func (m *Monitor) graphStateView(ctx context.Context, rec *spooltype.Record, evs []transcript.Event, want string) stateView {
	v := stateView{Step: -1}
	step := -1
	if want != "" {
		n, err := strconv.Atoi(want)
		if err != nil || n < 0 {
			v.Err = fmt.Sprintf("step %q: want a step number", want)
			return v
		}
		step, v.Chosen = n, true
	}
	steps, sha, at := checkpointedSteps(evs, step)
	v.Steps = steps
	if sha == "" {
		if step >= 0 {
			v.Err = fmt.Sprintf("the run has no state after step %d", step)
		} else {
			v.Err = "no checkpointed state yet"
		}
		return v
	}
	v.Step = at
	b, err := m.snapshot(ctx, rec.ThreadID, sha)
	if err != nil {
		v.Err = err.Error()
		return v
	}
	var snap struct {
		State map[string]any `json:"state"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		v.Err = fmt.Sprintf("state snapshot %s: %v", sha, err)
		return v
	}
	v.JSON = pretty(snap.State)
	return v
}

// checkpointedSteps reads the state checkpoints of evs: the steps after
// which the state is settled (no item pending), each once, in order, and
// the snapshot address of the state the page shows, with its step: the
// last checkpoint's when step is negative, else step's last settled one
// ("" when there is none).
func checkpointedSteps(evs []transcript.Event, step int) (steps []int, sha string, at int) {
	at = -1
	seen := map[int]bool{}
	for _, e := range evs {
		if e.Type != transcript.TypeStateCheckpoint {
			continue
		}
		var p transcript.StateCheckpoint
		if e.Decode(&p) != nil {
			continue
		}
		settled := len(p.Pending) == 0 || string(p.Pending) == "null"
		if settled && !seen[p.Step] {
			seen[p.Step] = true
			steps = append(steps, p.Step)
		}
		if step < 0 || p.Step == step && settled {
			sha, at = p.StateSHA256, p.Step
		}
	}
	return steps, sha, at
}

// snapshot reads state snapshot sha of run id, checked against its
// address.
func (m *Monitor) snapshot(ctx context.Context, id, sha string) ([]byte, error) {
	snapshots.Lock()
	b, ok := snapshots.m[sha]
	snapshots.Unlock()
	if ok {
		return b, nil
	}
	b, err := m.cfg.Orch.StateSnapshot(ctx, id, sha)
	if err != nil {
		return nil, fmt.Errorf("state snapshot %s: %w", sha, err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != sha {
		return nil, fmt.Errorf("state snapshot %s does not hash to its address", sha)
	}
	snapshots.Lock()
	if len(snapshots.m) > 512 {
		clear(snapshots.m)
	}
	snapshots.m[sha] = b
	snapshots.Unlock()
	return b, nil
}

// resumeGraph resumes a failed or cancelled run, once confirmed; the
// form may name the node to go on from.
func (m *Monitor) resumeGraph(w http.ResponseWriter, r *http.Request, rec *spooltype.Record) {
	page := "/threads/" + pathOf(rec.ThreadID)
	if !m.cfg.Orch.CanSign() {
		m.redirect(w, r, page, flash{Text: noSigner, Bad: true})
		return
	}
	cur, err := m.current(r, rec)
	if err != nil {
		m.fail(w, r, err)
		return
	}
	if cur.Status != thread.StatusError && cur.Status != thread.StatusCancelled {
		m.redirect(w, r, page, flash{Text: fmt.Sprintf("%s is %s: only a run that ended in error or was cancelled can be resumed (fork a completed run from a step).",
			cur.ThreadID, cur.Status), Bad: true})
		return
	}
	from := strings.TrimSpace(r.PostFormValue("from"))
	if r.PostFormValue("confirmed") != "1" {
		where := "the last checkpoint's next node (the step that failed runs again)"
		if from != "" {
			where = from
		}
		m.confirm(w, r, confirmData{Question: "Resume this graph run?", Action: page + "/resume", Button: "Resume", Back: page,
			Details: [][2]string{{"run", cur.ThreadID}, {"graph", cur.Directive}, {"status", string(cur.Status)}, {"goes on from", where},
				{"budget", "the continuation run carries what the chain has left of its spend limit"}},
			Fields: [][2]string{{"from", from}}})
		return
	}
	res, err := m.cfg.Orch.ResumeGraph(r.Context(), rec.ThreadID, orchestrator.GraphResumeRequest{From: from})
	if errors.Is(err, orchestrator.ErrGraphInvalid) {
		m.redirect(w, r, page, flash{Text: err.Error() + ".", Bad: true})
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	m.redirect(w, r, "/threads/"+pathOf(res.NewThreadID), flash{Text: fmt.Sprintf("Resumed %s as %s.", res.ResolvedThreadID, res.NewThreadID)})
}

// forkGraph forks a run at the form's step, once confirmed.
func (m *Monitor) forkGraph(w http.ResponseWriter, r *http.Request, rec *spooltype.Record) {
	page := "/threads/" + pathOf(rec.ThreadID)
	if !rec.IsGraph() {
		m.redirect(w, r, page, flash{Text: "Fork a thread from its transcript: each turn links to “fork from here”.", Bad: true})
		return
	}
	if !m.cfg.Orch.CanSign() {
		m.redirect(w, r, page, flash{Text: noSigner, Bad: true})
		return
	}
	step, err := strconv.Atoi(r.PostFormValue("step"))
	if err != nil || step < 1 {
		m.redirect(w, r, page, flash{Text: "Choose the step, from 1, whose checkpoint the fork starts from.", Bad: true})
		return
	}
	if r.PostFormValue("confirmed") != "1" {
		m.confirm(w, r, confirmData{Question: "Fork this graph run?", Action: page + "/fork", Button: "Fork", Back: page,
			Details: [][2]string{{"run", rec.ThreadID}, {"graph", rec.Directive}, {"from the checkpoint after step", strconv.Itoa(step)},
				{"children", "not adopted: the fork runs every step after it again"},
				{"budget", "what the run's chain had left after the step"}},
			Fields: [][2]string{{"step", strconv.Itoa(step)}}})
		return
	}
	res, err := m.cfg.Orch.ForkGraph(r.Context(), orchestrator.GraphForkRequest{RunID: rec.ThreadID, AtStep: step})
	var se *orchestrator.StepNotRecordedError
	if errors.As(err, &se) {
		m.redirect(w, r, page, flash{Text: err.Error() + ".", Bad: true})
		return
	}
	if err != nil {
		m.fail(w, r, err)
		return
	}
	m.redirect(w, r, "/threads/"+pathOf(res.Run.ThreadID), flash{Text: fmt.Sprintf("Forked %s at step %d as %s.", rec.ThreadID, step, res.Run.ThreadID)})
}

// markPaused says "paused" in the detail of the node a paused run stands
// at (current), as graph show's node table does.
func markPaused(rows []graph.NodeRow, current string) {
	for i := range rows {
		if rows[i].Node == current && rows[i].Status == graph.NodeWaiting {
			rows[i].Detail = strings.TrimSuffix("paused; "+rows[i].Detail, "; ")
		}
	}
}
