package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
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
}

// ErrNotGraph is returned for a record that is a thread's, not a graph run's.
var ErrNotGraph = errors.New("not a graph run")

// ErrNoGraphState is GraphState's error for a run without a checkpointed
// state (after that step).
var ErrNoGraphState = errors.New("no such graph state")

// GraphView reads rec's transcript (what verifies of it) and builds its
// node table and render. A finished run's render is also stored, signed, at
// knowledge/graphs/<graph>/<run>.md (best effort) for whoever reads the
// store, as a thread's knowledge render is when it is read.
func (o *Orchestrator) GraphView(ctx context.Context, rec *registry.Record) (*GraphView, error) {
	if !rec.IsGraph() {
		return nil, fmt.Errorf("%s: %w", rec.ThreadID, ErrNotGraph)
	}
	proj, err := o.Project(ctx, rec.Bundle)
	if err != nil {
		return nil, err
	}
	g, err := proj.Graph(rec.Directive)
	if err != nil {
		return nil, err
	}
	tr, err := o.ReadTranscript(ctx, rec)
	if err != nil {
		return nil, err
	}
	steps := InFlight(GraphSteps(tr.Events), rec)
	current, currentStatus := "", ""
	if !rec.Status.Terminal() {
		current, currentStatus = rec.CurrentNode, graph.NodeRunning
		if rec.Status == thread.StatusWaiting {
			currentStatus = graph.NodeWaiting
		}
	}
	rows := graph.Nodes(g, steps, current, currentStatus, string(rec.Status))
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
	v := &GraphView{Nodes: rows, Steps: steps, Render: graph.Render(g, info, steps, rows), Warnings: tr.Warnings}
	if v.Nodes == nil {
		v.Nodes = []graph.NodeRow{}
	}
	if o.signer != nil && len(tr.Warnings) == 0 && rec.Status.Terminal() {
		// The final render, once a run has ended (a running run's changes
		// with every step: it is made when read, not stored each time).
		signed := transcript.SignMarkdown(v.Render, o.signer, o.Now())
		if err := blobstore.PutView(ctx, o.store, blobkey.GraphKnowledge(rec.Directive, rec.ThreadID), signed); err != nil {
			o.threadLog(rec.ThreadID).Warn("graph render not stored", "error", err)
		}
	}
	return v, nil
}

// GraphSteps are a graph run's steps as its events tell them: each
// step_started and step_completed (a tool step writes both in its one
// segment), the items a foreach settled meanwhile.
func GraphSteps(events []transcript.Event) []graph.StepRecord {
	l := &stepLog{at: map[int]int{}}
	for _, e := range events {
		switch e.Type {
		case transcript.TypeStepStarted:
			var p transcript.StepStarted
			if e.Decode(&p) == nil {
				l.started(p)
			}
		case transcript.TypeForeachItemCompleted:
			var p transcript.ForeachItemCompleted
			if e.Decode(&p) == nil {
				l.itemCompleted(p)
			}
		case transcript.TypeStepCompleted:
			var p transcript.StepCompleted
			if e.Decode(&p) == nil {
				l.completed(e, p)
			}
		}
	}
	return l.out
}

// stepLog is the steps GraphSteps has read so far.
type stepLog struct {
	out []graph.StepRecord
	at  map[int]int // step → index in out
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
	for _, i := range sortedKeys(p.Children) {
		s.ThreadIDs = appendNew(s.ThreadIDs, p.Children[i])
	}
	if a := p.Action; a != nil {
		s.Action = actionText(a)
	}
}

// itemCompleted reads a foreach_item_completed.
func (l *stepLog) itemCompleted(p transcript.ForeachItemCompleted) {
	s := l.get(p.Step, p.Node)
	s.ItemsDone++
	if p.Status == "error" {
		s.ItemsFailed++
	}
}

// completed reads a step_completed, event e.
func (l *stepLog) completed(e transcript.Event, p transcript.StepCompleted) {
	s := l.get(p.Step, p.Node)
	s.Kind, s.Status, s.RoutedBy, s.NextNode, s.Assigned = p.Kind, p.Status, p.RoutedBy, p.NextNode, p.Assigned
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
		s.ItemsDone, s.ItemsTotal, s.ItemsFailed = p.ItemsDone, p.ItemsTotal, p.ItemsFailed
	}
	if p.Error != nil {
		s.Error = p.Error.Code + ": " + p.Error.Message
	}
}

// InFlight completes steps with what only rec knows of the step in
// flight: the item count of a foreach that has not settled (its events
// count the settled items, the record the total).
func InFlight(steps []graph.StepRecord, rec *registry.Record) []graph.StepRecord {
	if len(steps) == 0 || rec.Status.Terminal() || rec.ItemsTotal == 0 {
		return steps
	}
	s := &steps[len(steps)-1]
	if s.Status == "" && s.Node == rec.CurrentNode && s.ItemsTotal == 0 {
		s.ItemsTotal = rec.ItemsTotal
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
	proj, err := o.Project(ctx, rec.Bundle)
	if err != nil {
		return err
	}
	g, err := proj.Graph(rec.Directive)
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
	sha, at := "", -1
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
	if sha == "" {
		if step >= 0 {
			return nil, 0, &tagged{err: fmt.Errorf("run %s has no state after step %d (it has taken %d steps)", rec.ThreadID, step, rec.Step), tag: ErrNoGraphState}
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
	if _, err := o.ReadVerified(ctx, rec); err != nil {
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
	res := &ResumeResult{Success: true, Resumed: true, OldThreadID: resolved, NewThreadID: newRec.ThreadID,
		ResolvedThreadID: resolved, Directive: rec.Directive, NewThreadResult: newRec}
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
