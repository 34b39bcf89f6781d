package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// GraphView is what `spool graph show` shows of a run: its node table
// (one row per node, in file order) and its steps, read from its
// transcript, and the knowledge render made of them.
type GraphView struct {
	Nodes  []graph.NodeRow    `json:"nodes"`
	Steps  []graph.StepRecord `json:"steps"`
	Render []byte             `json:"-"`
	// Warnings say what of the transcript did not verify (the view shows
	// the intact prefix).
	Warnings []string `json:"warnings,omitempty"`
	// WakeAt is when a sleeping run wakes (SleepingUntil); zero when the
	// run does not sleep. A run waiting for a message with a timeout has
	// the timeout's (WaitingForMessage).
	WakeAt time.Time `json:"wake_at,omitzero"`
	// MessageName is the name of the message a run waiting at a
	// wait_message node waits for.
	MessageName string `json:"message_name,omitempty"`
}

// wakeOf sets what v says of rec's wait: when a sleeping run wakes, what
// message a run waits for and until when.
func (v *GraphView) wakeOf(rec *registry.Record) {
	v.WakeAt, _ = SleepingUntil(rec)
	if name, at, ok := WaitingForMessageOf(rec); ok {
		v.MessageName, v.WakeAt = name, at
	}
}

// waitDetail is the detail of the node where rec, a run waiting at a
// sleep or wait_message node, waits: "sleeping until T", "for message
// NAME" (", until T" with a timeout); "" for any other run.
func waitDetail(rec *registry.Record) string {
	if at, ok := SleepingUntil(rec); ok {
		return "sleeping until " + at.Format(time.RFC3339)
	}
	name, at, ok := WaitingForMessageOf(rec)
	if !ok {
		return ""
	}
	d := "for message " + name
	if !at.IsZero() {
		d += ", until " + at.Format(time.RFC3339)
	}
	return d
}

// WaitingForMessageOf is the name of the message rec, a run waiting at a
// wait_message node, waits for, and when its wait times out (zero:
// never, within its limits); false when rec waits for none.
func WaitingForMessageOf(rec *registry.Record) (string, time.Time, bool) {
	if rec.Status != thread.StatusWaiting || rec.WaitingFor != registry.WaitingForMessage {
		return "", time.Time{}, false
	}
	at, _ := time.Parse(time.RFC3339Nano, rec.Extra["wake_at"])
	return rec.Extra["message_name"], at.UTC(), true
}

// MessageArrived reports whether the message rec, a run waiting at a
// wait_message node, waits for is already kept for it: one sent while it
// was paused, which the wake-up its unpause enqueued is about to take.
// false when rec waits for none.
func (o *Orchestrator) MessageArrived(ctx context.Context, rec *registry.Record) (bool, error) {
	name, _, ok := WaitingForMessageOf(rec)
	if !ok {
		return false, nil
	}
	var after int64
	if s := rec.Extra["message_after"]; s != "" {
		if _, err := fmt.Sscan(s, &after); err != nil {
			return false, fmt.Errorf("message_after of %s: %w", rec.ThreadID, err)
		}
	}
	ms, err := o.reg.Messages(ctx, rec.ThreadID, name, after)
	return len(ms) > 0, err
}

// SleepingUntil is when rec, a run waiting at a sleep node, wakes: the
// registry's wake_at, which is the sleep's end, or the run's duration
// limit when that comes first (the run then ends
// duration_seconds_exceeded). false when rec does not sleep.
func SleepingUntil(rec *registry.Record) (time.Time, bool) {
	if rec.Status != thread.StatusWaiting || rec.WaitingFor != registry.WaitingForSleep {
		return time.Time{}, false
	}
	at, err := time.Parse(time.RFC3339Nano, rec.Extra["wake_at"])
	if err != nil {
		return time.Time{}, false
	}
	return at.UTC(), true
}

// ErrNotGraph is returned for a record that is a thread's, not a graph run's.
var ErrNotGraph = errors.New("not a graph run")

// ErrNoGraphState is GraphState's error for a run without a checkpointed
// state (after that step).
var ErrNoGraphState = errors.New("no such graph state")

// pinnedGraph is the graph of run rec, as its project's snapshot (the
// bundle the run pinned) holds it, with that project.
func (o *Orchestrator) pinnedGraph(ctx context.Context, rec *registry.Record) (*Project, *graph.Graph, error) {
	proj, err := o.Project(ctx, rec.Bundle)
	if err != nil {
		return nil, nil, err
	}
	g, err := proj.Graph(rec.Directive)
	if err != nil {
		return nil, nil, err
	}
	return proj, g, nil
}

// GraphView reads rec's transcript (what verifies of it) and builds its
// node table and render. A finished run's render is also stored, signed, at
// knowledge/graphs/<graph>/<run>.md (best effort) for whoever reads the
// store, as a thread's knowledge render is when it is read.
func (o *Orchestrator) GraphView(ctx context.Context, rec *registry.Record) (*GraphView, error) {
	if !rec.IsGraph() {
		return nil, fmt.Errorf("%s: %w", rec.ThreadID, ErrNotGraph)
	}
	_, g, err := o.pinnedGraph(ctx, rec)
	if err != nil {
		return nil, err
	}
	tr, err := o.ReadTranscript(ctx, rec)
	if err != nil {
		return nil, err
	}
	steps, warnings := o.EarlierSteps(ctx, rec)
	steps = append(steps, InFlight(GraphSteps(tr.Events), rec)...)
	rows := nodeRows(g, steps, rec)
	info := o.runInfo(ctx, rec)
	v := &GraphView{Nodes: rows, Steps: steps, Render: graph.Render(g, info, steps, rows), Warnings: append(tr.Warnings, warnings...)}
	if v.Nodes == nil {
		v.Nodes = []graph.NodeRow{}
	}
	v.wakeOf(rec)
	if o.signer != nil && len(v.Warnings) == 0 && rec.Status.Terminal() {
		// The final render, once a run has ended (a running run's changes
		// with every step: it is made when read, not stored each time).
		signed := transcript.SignMarkdown(v.Render, o.signer, o.Now())
		if err := blobstore.PutView(ctx, o.store, blobkey.GraphKnowledge(rec.Directive, rec.ThreadID), signed); err != nil {
			o.threadLog(rec.ThreadID).Warn("graph render not stored", "error", err)
		}
	}
	return v, nil
}

// nodeRows is g's node table for rec's steps: the node rec stands at is
// running, or waiting (with what it waits for) while rec waits or is
// paused (its detail says paused).
func nodeRows(g *graph.Graph, steps []graph.StepRecord, rec *registry.Record) []graph.NodeRow {
	current, currentStatus := "", ""
	if !rec.Status.Terminal() {
		current, currentStatus = rec.CurrentNode, graph.NodeRunning
		if rec.Status == thread.StatusWaiting || rec.Status == thread.StatusPaused {
			currentStatus = graph.NodeWaiting
		}
	}
	rows := graph.Nodes(g, steps, current, currentStatus, string(rec.Status))
	d := waitDetail(rec)
	if rec.Status == thread.StatusPaused {
		d = strings.TrimSuffix("paused; "+d, "; ")
	}
	if d != "" {
		for i := range rows {
			if rows[i].Node == current && rows[i].Status == graph.NodeWaiting {
				rows[i].Detail = strings.TrimPrefix(rows[i].Detail+"; "+d, "; ")
			}
		}
	}
	return rows
}

// runInfo is the head of rec's render: its ids, status, duration so far
// (or in all, once it ended) and the spend of its whole subtree.
func (o *Orchestrator) runInfo(ctx context.Context, rec *registry.Record) graph.RunInfo {
	info := graph.RunInfo{RunID: rec.ThreadID, Graph: rec.Directive, Digest: rec.GraphDigest, Status: string(rec.Status),
		CurrentNode: rec.CurrentNode, Step: rec.Step, StartedAt: rec.StartedAt, Spend: rec.Cost.Spend, SuppressedErrors: rec.SuppressedErrors}
	if !rec.StartedAt.IsZero() {
		end := o.Now()
		if rec.Status.Terminal() {
			end = rec.UpdatedAt
		}
		info.Duration = end.Sub(rec.StartedAt).Round(time.Millisecond)
	}
	if spend, err := o.SubtreeSpend(ctx, rec); err == nil {
		info.Spend = spend
	}
	return info
}

// maxEarlierRuns bounds how many runs back EarlierSteps reads.
const maxEarlierRuns = 50

// EarlierSteps are the steps of the runs whose story rec carries on, in
// the order they ran, each with the run it ran in: the run a resumed run
// resumed (with the steps of the runs that one carried on), and the steps
// up to the fork's of the run a fork was forked from; none for a run that
// is neither. A resumed run's node table and steps so show the nodes its
// predecessors took as taken, where they were. A run whose transcript
// does not read ends the story there, with a warning saying so.
func (o *Orchestrator) EarlierSteps(ctx context.Context, rec *registry.Record) ([]graph.StepRecord, []string) {
	var runs [][]graph.StepRecord
	var warnings []string
	upTo := -1 // past a fork, only the steps up to its step are its story
	for i := 0; i < maxEarlierRuns; i++ {
		from := rec.PreviousThreadID
		if from == "" && rec.ForkedFrom != "" {
			from = rec.ForkedFrom
			if upTo < 0 || rec.ForkTurn < upTo {
				upTo = rec.ForkTurn
			}
		}
		if from == "" {
			break
		}
		prev, err := o.reg.Get(ctx, from)
		if err == nil && prev.IsGraph() {
			var tr *transcript.Transcript
			if tr, err = o.ReadTranscript(ctx, prev); err == nil {
				runs = append(runs, stepsOf(InFlight(GraphSteps(tr.Events), prev), from, upTo))
				rec = prev
				continue
			}
		}
		if err != nil {
			warnings = append(warnings, fmt.Sprintf("the steps of %s, which %s carries on, do not read: %v", from, rec.ThreadID, err))
		}
		break
	}
	var out []graph.StepRecord
	for i := len(runs) - 1; i >= 0; i-- {
		out = append(out, runs[i]...)
	}
	return out, warnings
}

// stepsOf are run's steps, marked as run's: those up to step upTo that
// had ended (a fork's story), or all when upTo < 0.
func stepsOf(steps []graph.StepRecord, run string, upTo int) []graph.StepRecord {
	out := steps[:0]
	for _, s := range steps {
		if upTo >= 0 && (s.Step > upTo || s.Status == "") {
			continue
		}
		if s.Run == "" {
			s.Run = run
		}
		out = append(out, s)
	}
	return out
}

// GraphSteps are a graph run's steps as its events tell them: each
// step_started and step_completed (a tool step writes both in its one
// segment), the items a foreach settled meanwhile, and the end of a step
// the run's cancel or failure overtook (graph_cancelled, graph_error).
func GraphSteps(events []transcript.Event) []graph.StepRecord {
	l := &stepLog{at: map[int]int{}, spawned: map[string]bool{}}
	for _, e := range events {
		l.read(e)
	}
	return l.out
}

// stepLog is the steps GraphSteps has read so far, and what it needs to
// count the items of a step the run's end overtook: the children each
// step planned and the items it settled (by index in out), the children
// whose start the run recorded, and each step's item count (its pending
// checkpoint's).
type stepLog struct {
	out     []graph.StepRecord
	at      map[int]int // step → index in out
	planned map[int]map[string]string
	settled map[int]map[string]bool
	spawned map[string]bool
}

// read reads one event of the run's transcript.
func (l *stepLog) read(e transcript.Event) {
	switch e.Type {
	case transcript.TypeStepStarted:
		decoded(e, l.started)
	case transcript.TypeChildSpawned:
		decoded(e, func(p transcript.ChildSpawned) { l.spawned[p.ChildID] = true })
	case transcript.TypeForeachItemCompleted:
		decoded(e, l.itemCompleted)
	case transcript.TypeStepCompleted:
		decoded(e, func(p transcript.StepCompleted) { l.completed(e, p) })
	case transcript.TypeStateCheckpoint:
		decoded(e, func(p transcript.StateCheckpoint) { l.pending(p.Pending) })
	case transcript.TypeGraphCancelled:
		l.overtaken(e, graph.StepStatusCancelled, "")
	case transcript.TypeGraphError:
		decoded(e, func(p transcript.GraphErrorEvent) { l.overtaken(e, graph.StepStatusError, p.Code+": "+p.Message) })
	}
}

// decoded hands e's payload, decoded as T, to f; a payload that does not
// decode is passed over.
func decoded[T any](e transcript.Event, f func(T)) {
	var p T
	if e.Decode(&p) == nil {
		f(p)
	}
}

// get returns step's record, added when it is new (or another node's).
func (l *stepLog) get(step int, node string) *graph.StepRecord {
	if i, ok := l.at[step]; ok && l.out[i].Node == node {
		return &l.out[i]
	}
	l.out = append(l.out, graph.StepRecord{Step: step, Node: node})
	l.at[step] = len(l.out) - 1
	return &l.out[len(l.out)-1]
}

// started reads a step_started.
func (l *stepLog) started(p transcript.StepStarted) {
	s := l.get(p.Step, p.Node)
	s.Kind = p.Kind
	if s.Started.IsZero() {
		s.Started, _ = time.Parse(time.RFC3339Nano, p.StartedAt)
	}
	planned := inner(&l.planned, l.at[p.Step])
	for _, k := range sortedKeys(p.Children) {
		s.ThreadIDs = appendNew(s.ThreadIDs, p.Children[k])
		planned[k] = p.Children[k]
	}
	if a := p.Action; a != nil {
		s.Action = actionText(a)
	}
}

// itemCompleted reads a foreach_item_completed: a child that ended
// cancelled is a cancelled item, any other error a failed one.
func (l *stepLog) itemCompleted(p transcript.ForeachItemCompleted) {
	s := l.get(p.Step, p.Node)
	s.ItemsDone++
	switch {
	case p.Status != "error":
	case p.Error != nil && p.Error.Code == string(thread.StatusCancelled):
		s.ItemsCancelled++
	default:
		s.ItemsFailed++
	}
	inner(&l.settled, l.at[p.Step])[strconv.Itoa(p.Index)] = true
}

// inner is (*m)[i], made (with *m) when it is not there yet.
func inner[V any](m *map[int]map[string]V, i int) map[string]V {
	if *m == nil {
		*m = map[int]map[string]V{}
	}
	if (*m)[i] == nil {
		(*m)[i] = map[string]V{}
	}
	return (*m)[i]
}

// pending reads the step in flight of a state_checkpoint: its item count
// (the worker's pending step, whose "items" is how many a foreach or a
// wait has), which its events do not say until it completes.
func (l *stepLog) pending(raw json.RawMessage) {
	if len(raw) == 0 || string(raw) == "null" {
		return
	}
	var p struct {
		Step  int    `json:"step"`
		Node  string `json:"node"`
		Items int    `json:"items"`
	}
	if json.Unmarshal(raw, &p) != nil {
		return
	}
	if i, ok := l.at[p.Step]; ok && l.out[i].Node == p.Node && fansOut(l.out[i].Kind) {
		l.out[i].ItemsTotal = max(l.out[i].ItemsTotal, p.Items)
	}
}

// fansOut reports whether a step of kind counts items.
func fansOut(kind string) bool { return kind == graph.KindForeach || kind == graph.KindWait }

// completed reads a step_completed, event e.
func (l *stepLog) completed(e transcript.Event, p transcript.StepCompleted) {
	s := l.get(p.Step, p.Node)
	s.Kind, s.Status, s.RoutedBy, s.NextNode, s.Assigned, s.Unresolved = p.Kind, p.Status, p.RoutedBy, p.NextNode, p.Assigned, p.Unresolved
	s.Ended = e.Timestamp
	if s.Started.IsZero() {
		if t, err := time.Parse(time.RFC3339Nano, p.StartedAt); err == nil && p.ElapsedMS > 0 {
			s.Started = t
		}
		if s.Started.IsZero() || s.Started.After(s.Ended) {
			s.Started = e.Timestamp.Add(-time.Duration(p.ElapsedMS) * time.Millisecond)
		}
	}
	for _, id := range p.ThreadIDs {
		s.ThreadIDs = appendNew(s.ThreadIDs, id)
	}
	if p.ItemsTotal > 0 {
		// The step's own counts; its failed ones include the
		// cancelled items its events told apart.
		s.ItemsDone, s.ItemsTotal, s.ItemsFailed = p.ItemsDone, p.ItemsTotal, max(0, p.ItemsFailed-s.ItemsCancelled)
	}
	if p.Error != nil {
		s.Error = p.Error.Code + ": " + p.Error.Message
	}
}

// overtaken ends the step in flight when the run ended in the middle of
// it (e is its graph_cancelled or graph_error): status and, for an
// error, what it was; its children that had started and not ended were
// cancelled with the run (the worker cancels them), and count as
// cancelled items. A run whose last step completed has none in flight.
func (l *stepLog) overtaken(e transcript.Event, status, errText string) {
	if len(l.out) == 0 || l.out[len(l.out)-1].Status != "" {
		return
	}
	i := len(l.out) - 1
	s := &l.out[i]
	s.Status, s.Ended, s.Error = status, e.Timestamp, errText
	if !fansOut(s.Kind) {
		return
	}
	for k, id := range l.planned[i] {
		if !l.settled[i][k] && l.spawned[id] {
			s.ItemsDone++
			s.ItemsCancelled++
		}
	}
}

// InFlight completes steps with what only rec knows of the step in
// flight: the item count of a foreach that has not settled (its events
// count the settled items, the record the total), and, for a run that
// ended with a step in flight and no event that says so (a transcript
// written before the cancel of a waiting run wrote graph_cancelled, or
// one cut short), that the run's end ended the step: cancelled, or an
// error, when the record's end is known.
func InFlight(steps []graph.StepRecord, rec *registry.Record) []graph.StepRecord {
	if len(steps) == 0 || steps[len(steps)-1].Status != "" {
		return steps
	}
	s := &steps[len(steps)-1]
	switch {
	case rec.Status.Terminal() && rec.Error != nil && rec.Error.Code == string(thread.StatusCancelled):
		s.Status = graph.StepStatusCancelled
	case rec.Status.Terminal() && rec.Error != nil:
		s.Status, s.Error = graph.StepStatusError, rec.Error.Code+": "+rec.Error.Message
	case rec.Status.Terminal():
		return steps
	case s.Node == rec.CurrentNode && s.ItemsTotal == 0:
		s.ItemsTotal = rec.ItemsTotal
		return steps
	default:
		return steps
	}
	if rec.Status != thread.StatusContinued {
		s.Ended = rec.UpdatedAt // when the run ended (a continued run's is when it was resumed)
	}
	return steps
}

func appendNew(list []string, id string) []string {
	for _, x := range list {
		if x == id {
			return list
		}
	}
	return append(list, id)
}

func actionText(a *transcript.StepAction) string {
	switch {
	case a.Tool != "":
		return "tool " + a.Tool
	case a.Directive != "":
		return "directive " + a.Directive
	case a.Graph != "":
		return "graph " + a.Graph
	}
	return ""
}

// resumableRun is the record of the run id's chain has reached, when it
// is a graph run that ended in error or was cancelled.
func (o *Orchestrator) resumableRun(ctx context.Context, id string) (*registry.Record, error) {
	rec, err := o.Latest(ctx, id)
	if err != nil {
		return nil, err
	}
	resolved := rec.ThreadID
	if !rec.IsGraph() {
		return nil, fmt.Errorf("%s is a thread, not a graph run: resume it with `spool thread resume`", resolved)
	}
	if rec.Status != thread.StatusError && rec.Status != thread.StatusCancelled {
		if rec.Status == thread.StatusCompleted {
			return nil, fmt.Errorf("run %s completed: only a run that ended in error or was cancelled can be resumed (fork it to run it again from a step: spool graph fork)", resolved)
		}
		return nil, &NotResumableError{ThreadID: resolved, Status: rec.Status}
	}
	return rec, nil
}

// checkResumeEdits refuses a resume of run rec from a node its graph
// lacks, or that sets the run's inputs or a _ key.
func (o *Orchestrator) checkResumeEdits(ctx context.Context, rec *registry.Record, req GraphResumeRequest) error {
	_, g, err := o.pinnedGraph(ctx, rec)
	if err != nil {
		return err
	}
	if req.From != "" && g.Node(req.From) == nil {
		return &tagged{err: fmt.Errorf("--from %s: graph %s has no such node", req.From, rec.Directive), tag: ErrGraphInvalid}
	}
	for k := range req.Set {
		if k == "inputs" || len(k) > 0 && k[0] == '_' {
			return &tagged{err: fmt.Errorf("--set %s: inputs and _ keys are the run's, not editable", k), tag: ErrGraphInvalid}
		}
	}
	return nil
}

// logGraphCancelled writes graph_cancelled into the transcript of run
// rec, which Cancel has just ended with no activation holding it (it was
// waiting on its children or a person, or not started): the event its
// worker writes when it stops the run itself, so its transcript says
// where the run was when it ended (the step in flight ends there) and
// which children the cancel reached. Best effort, logged: the record
// says the run was cancelled either way.
func (o *Orchestrator) logGraphCancelled(ctx context.Context, rec *registry.Record) {
	if rec.Transcript.Segments == 0 {
		return // not started: no transcript, no step
	}
	ev := transcript.GraphCancelled{Step: rec.Step, Node: rec.CurrentNode, RequestedBy: "user", Reason: "cancelled by request"}
	if kids, err := o.reg.ListChildren(ctx, rec.ThreadID); err == nil {
		for _, k := range kids {
			if k.Status == thread.StatusCancelled || !k.Status.Terminal() {
				ev.CancelledChildren = append(ev.CancelledChildren, k.ThreadID)
			}
		}
	}
	if err := o.logEvent(ctx, rec.ThreadID, transcript.TypeGraphCancelled, ev); err != nil {
		o.threadLog(rec.ThreadID).Warn("graph_cancelled not logged", "error", err)
	}
}

// GraphState is the state of run rec after step (the last checkpoint's
// when step < 0), and the step it is the state after.
func (o *Orchestrator) GraphState(ctx context.Context, rec *registry.Record, step int) (map[string]any, int, error) {
	if !rec.IsGraph() {
		return nil, 0, fmt.Errorf("%s: %w", rec.ThreadID, ErrNotGraph)
	}
	tr, err := o.ReadTranscript(ctx, rec)
	if err != nil {
		return nil, 0, err
	}
	sha, at := stateCheckpoint(tr, step)
	if sha == "" {
		if step >= 0 {
			// Another run of the chain took the step: its state.
			other, steps := o.chainRunWithStep(ctx, rec, step)
			if r, err := o.reg.Get(ctx, other); other != "" && err == nil {
				return o.GraphState(ctx, r, step)
			}
			what := "run " + rec.ThreadID
			if steps > rec.Step {
				what += " and the runs of its chain"
			}
			return nil, 0, &tagged{err: fmt.Errorf("%s took %s: there is no state after step %d", what, thread.Count(max(steps, rec.Step), "step", "steps"), step),
				tag: ErrNoGraphState}
		}
		return nil, 0, &tagged{err: fmt.Errorf("run %s has no checkpointed state yet", rec.ThreadID), tag: ErrNoGraphState}
	}
	b, err := o.store.Get(ctx, blobkey.GraphState(rec.ThreadID, sha))
	if err != nil {
		return nil, 0, fmt.Errorf("state snapshot %s of %s: %w", sha, rec.ThreadID, err)
	}
	if tr.Attested(transcript.ArtifactGraphState, b) == 0 {
		return nil, 0, fmt.Errorf("state snapshot %s of %s: no verified checkpoint attests it", sha, rec.ThreadID)
	}
	var snap struct {
		State map[string]any `json:"state"`
	}
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, 0, fmt.Errorf("state snapshot %s of %s: %w", sha, rec.ThreadID, err)
	}
	return snap.State, at, nil
}

// stateCheckpoint is the state snapshot (its SHA-256) that tr's state
// checkpoints recorded after step, with nothing pending (the last one
// when step < 0), and the step it is after; "" when there is none.
func stateCheckpoint(tr *transcript.Transcript, step int) (sha string, at int) {
	at = -1
	for _, e := range tr.Events {
		if e.Type != transcript.TypeStateCheckpoint {
			continue
		}
		var p transcript.StateCheckpoint
		if e.Decode(&p) != nil {
			continue
		}
		if step < 0 || (p.Step == step && (len(p.Pending) == 0 || string(p.Pending) == "null")) {
			sha, at = p.StateSHA256, p.Step
		}
	}
	return sha, at
}

// GraphResumeRequest is a user's resume of a graph run (`spool graph
// resume`): the node to go on from instead of the cursor, and state keys
// to set (never inputs or _ keys).
type GraphResumeRequest struct {
	From string
	Set  map[string]any
}

// GraphResumeField carries a resume's edits to its run's first
// activation (the worker's GraphResumeField).
const GraphResumeField = "graph_resume"

// ResumeGraph starts a continuation run of a graph run that ended in
// error or was cancelled: a new id in the same tree and chain, from the
// last verified checkpoint (the failed step runs again; a foreach keeps
// its settled items), with what the chain's budget has left. The old
// run becomes continued and gets graph_resumed. A completed run is
// refused (fork it instead).
func (o *Orchestrator) ResumeGraph(ctx context.Context, id string, req GraphResumeRequest) (*ResumeResult, error) {
	rec, err := o.resumableRun(ctx, id)
	if err != nil {
		return nil, err
	}
	resolved := rec.ThreadID
	if err := o.checkResumeEdits(ctx, rec, req); err != nil {
		return nil, err
	}
	if _, err := o.readVerified(ctx, rec); err != nil {
		return nil, fmt.Errorf("resume %s: %w", resolved, err)
	}
	edits, err := json.Marshal(map[string]any{"from": req.From, "set": req.Set})
	if err != nil {
		return nil, err
	}
	newRec, err := o.Start(ctx, StartRequest{Graph: true, Directive: rec.Directive, Inputs: rec.Inputs, ParentID: rec.ParentID,
		Bundle: rec.Bundle, Queue: rec.Queue, PreviousThreadID: resolved, Kind: KindResume,
		Fields: map[string]string{GraphResumeField: string(edits)}})
	if err != nil {
		return nil, err
	}
	if _, _, err := o.reg.LinkContinuation(ctx, resolved, newRec.ThreadID); err != nil {
		_, _ = o.Cancel(ctx, newRec.ThreadID, true)
		return nil, fmt.Errorf("resume %s: %w", resolved, err)
	}
	keys := make([]string, 0, len(req.Set))
	for k := range req.Set {
		keys = append(keys, k)
	}
	if err := o.logEvent(ctx, resolved, transcript.TypeGraphResumed, transcript.GraphResumed{ContinuationRunID: newRec.ThreadID,
		FromNode: req.From, StateEdits: sortedStrings(keys)}); err != nil {
		o.threadLog(resolved).Warn("graph_resumed not logged", "error", err)
	}
	res := &ResumeResult{Success: true, Resumed: true, ThreadID: newRec.ThreadID, OldThreadID: resolved, NewThreadID: newRec.ThreadID,
		ResolvedThreadID: resolved, Directive: rec.Directive, NewThreadResult: newRec, Run: newRec}
	if id != resolved {
		orig := id
		res.OriginalThreadID = &orig
	}
	return res, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	return sortedStrings(keys)
}

// sortedStrings sorts item indexes numerically, other strings as text.
func sortedStrings(keys []string) []string {
	num := func(s string) (int, bool) {
		n := 0
		for _, c := range s {
			if c < '0' || c > '9' {
				return 0, false
			}
			n = n*10 + int(c-'0')
		}
		return n, s != ""
	}
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0; j-- {
			a, aok := num(keys[j-1])
			b, bok := num(keys[j])
			less := keys[j] < keys[j-1]
			if aok && bok {
				less = b < a
			}
			if !less {
				break
			}
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}
