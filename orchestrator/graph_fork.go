package orchestrator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// GraphForkRequest asks for a fork of a graph run at one of its steps
// (`spool graph fork RUN --at-step N [--set K=JSON] [--from NODE]`).
type GraphForkRequest struct {
	// RunID is the run to fork, AtStep the step (from 1) whose
	// checkpoint the fork starts from.
	RunID  string
	AtStep int
	// From, when set, is the node the fork goes on from instead of the
	// checkpoint's cursor; Set edits state keys (never inputs or _ keys).
	From string
	Set  map[string]any
}

// GraphForkResult is what ForkGraph did.
type GraphForkResult struct {
	ForkedFrom string `json:"forked_from"`
	ForkStep   int    `json:"fork_step"`
	// Steps is how many steps the source had taken.
	Steps int `json:"steps"`
	// NextNode is the node the fork goes into first (the checkpoint's
	// cursor, or From).
	NextNode string `json:"next_node"`
	// StateEdits are the state keys Set edited.
	StateEdits []string `json:"state_edits,omitempty"`
	// SourceSegment and SourceChainHash name the source's segment that
	// holds the checkpoint the fork starts from.
	SourceSegment   int64  `json:"source_segment"`
	SourceChainHash string `json:"source_chain_hash"`
	// Budget is the fork's spend ceiling: what the source's chain had
	// left after the step, at most what the parent has left.
	Budget         float64          `json:"budget"`
	WorkspaceFiles int              `json:"workspace_files"`
	Run            *registry.Record `json:"run"`
}

// StepNotRecordedError is a fork at a step the run has no checkpoint
// after. Chain: Steps counts the steps of the run's continuation chain
// (none of its runs took the step).
type StepNotRecordedError struct {
	RunID       string
	Step, Steps int
	Chain       bool
}

func (e *StepNotRecordedError) Error() string {
	what := "run " + e.RunID
	if e.Chain {
		what += " and the runs of its chain"
	}
	return fmt.Sprintf("%s took %s: there is no completed step %d to fork at (spool graph show %s lists them)", what,
		thread.Count(e.Steps, "step", "steps"), e.Step, e.RunID)
}

// chainRunWithStep is the run of src's continuation chain, other than
// src, whose transcript holds the checkpoint after step n ("" for none),
// and the most steps a run of the chain took. A step completes in one run
// of a chain: a resume carries on the step counter.
func (o *Orchestrator) chainRunWithStep(ctx context.Context, src *registry.Record, n int) (string, int) {
	chain, err := o.reg.GetChain(ctx, src.ThreadID)
	if err != nil {
		return "", 0
	}
	most := 0
	for _, r := range chain {
		most = max(most, r.Step)
		if r.ThreadID == src.ThreadID || !r.IsGraph() {
			continue
		}
		tr, err := o.ReadTranscript(ctx, r)
		if err != nil {
			continue
		}
		if at, _, _ := stepCheckpoint(tr, n); at != nil {
			return r.ThreadID, most
		}
	}
	return "", most
}

// ForkGraph starts a new run beside run req.RunID (the same graph, pinned
// definition, bundle, inputs, parent and limits; forked_from = the run,
// fork_turn = the step) whose state and cursor are the run's checkpoint
// after step req.AtStep, with req's edits; the run is left as it is.
// As for a thread fork (Fork): the source's transcript is verified
// strictly, the fork carries what the source's chain had left after the
// step (forkBudget), and gets a workspace of its own, made as the
// source's was at that checkpoint (workspaceAt: the tree's built-in file
// writes up to then). Children of the run are not adopted: the fork runs
// everything after the step again. The fork's first activation loads the
// checkpoint (the worker's carry) and records graph_started with
// forked_from and fork_step.
func (o *Orchestrator) ForkGraph(ctx context.Context, req GraphForkRequest) (*GraphForkResult, error) {
	src, keys, err := o.graphForkSource(ctx, req)
	if err != nil {
		return nil, err
	}
	v, err := o.VerifyThread(ctx, src.ThreadID, transcript.Strict)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", src.ThreadID, err)
	}
	src = v.Record()
	pt, next, err := graphForkAt(v.Transcript, req.AtStep)
	if se := (*StepNotRecordedError)(nil); errors.As(err, &se) {
		// Another run of the chain took the step (a resumed run's
		// predecessor, or the resume of a run): fork that one.
		if other, steps := o.chainRunWithStep(ctx, src, req.AtStep); other != "" {
			req.RunID = other
			return o.ForkGraph(ctx, req)
		} else if steps > se.Steps {
			se.Steps, se.Chain = steps, true
		}
	}
	if err != nil {
		return nil, err
	}
	if req.From != "" {
		next = req.From
	}
	left, err := o.forkBudget(ctx, src, pt)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", src.ThreadID, err)
	}
	files, err := o.workspaceAt(ctx, src, pt, 0)
	if err != nil {
		return nil, fmt.Errorf("fork %s: workspace at step %d: %w", src.ThreadID, pt.Turn, err)
	}
	edits, err := json.Marshal(map[string]any{"from": req.From, "set": req.Set})
	if err != nil {
		return nil, err
	}
	id := o.newID(IDRequest{Directive: src.Directive, ParentID: src.ParentID})
	rec, err := o.startFork(ctx, src, files, StartRequest{
		ID: id, Graph: true, Directive: src.Directive, Inputs: src.Inputs, ParentID: src.ParentID, Bundle: src.Bundle, Queue: src.Queue,
		Fork:   &ForkStart{From: src, Point: pt, Left: left},
		Fields: map[string]string{GraphResumeField: string(edits)},
	})
	if err != nil {
		return nil, err
	}
	o.threadLog(id).Info("graph run forked", "forked_from", src.ThreadID, "fork_step", pt.Turn, "next_node", next,
		"budget", rec.Limits.Spend, "workspace_files", len(files))
	return &GraphForkResult{ForkedFrom: src.ThreadID, ForkStep: pt.Turn, Steps: pt.Turns, NextNode: next, StateEdits: keys,
		SourceSegment: pt.Segment, SourceChainHash: pt.ChainHash, Budget: rec.Limits.Spend, WorkspaceFiles: len(files), Run: rec}, nil
}

// graphForkSource is the run req forks, when it is a graph run whose
// graph has req's node, with the keys req's state edits set.
func (o *Orchestrator) graphForkSource(ctx context.Context, req GraphForkRequest) (*registry.Record, []string, error) {
	src, err := o.reg.Get(ctx, req.RunID)
	if err != nil {
		return nil, nil, err
	}
	if !src.IsGraph() {
		return nil, nil, fmt.Errorf("%s is a thread, not a graph run: fork it with `spool thread fork`", src.ThreadID)
	}
	if req.AtStep < 1 {
		return nil, nil, &StepNotRecordedError{RunID: src.ThreadID, Step: req.AtStep, Steps: src.Step}
	}
	proj, err := o.Project(ctx, src.Bundle)
	if err != nil {
		return nil, nil, err
	}
	g, err := proj.Graph(src.Directive)
	if err != nil {
		return nil, nil, err
	}
	if req.From != "" && g.Node(req.From) == nil {
		return nil, nil, &tagged{err: fmt.Errorf("--from %s: graph %s has no such node", req.From, src.Directive), tag: ErrGraphInvalid}
	}
	keys, err := stateEditKeys(req.Set)
	if err != nil {
		return nil, nil, err
	}
	return src, keys, nil
}

// stateEditKeys checks a resume's or fork's state edits (never inputs
// or _ keys) and returns their keys in order.
func stateEditKeys(set map[string]any) ([]string, error) {
	keys := make([]string, 0, len(set))
	for k := range set {
		if k == "" || k == "inputs" || k[0] == '_' {
			return nil, &tagged{err: fmt.Errorf("--set %s: inputs and _ keys are the run's, not editable", k), tag: ErrGraphInvalid}
		}
		keys = append(keys, k)
	}
	return sortedStrings(keys), nil
}

// graphForkAt finds where a fork of run tr at step n starts: its last
// state_checkpoint after step n completed (no step in flight). The
// ForkPoint's Turn is the step and Turns the steps the run took; Spend
// is the run's own (a graph makes no model calls), Children the runs
// and threads it started up to then. next is the checkpoint's cursor.
func graphForkAt(tr *transcript.Transcript, n int) (transcript.ForkPoint, string, error) {
	at, next, steps := stepCheckpoint(tr, n)
	if at == nil {
		return transcript.ForkPoint{}, "", &StepNotRecordedError{RunID: tr.ThreadID, Step: n, Steps: steps}
	}
	pt := transcript.ForkPoint{Turn: n, Turns: steps, Seq: at.Seq, Time: at.Timestamp}
	var err error
	if pt.Children, err = childrenBy(tr, at.Seq); err != nil {
		return transcript.ForkPoint{}, "", err
	}
	for _, s := range tr.Segments {
		if s.FirstSeq <= at.Seq && at.Seq <= s.LastSeq {
			pt.Segment, pt.ChainHash = s.Number, s.ChainHash
			break
		}
	}
	if pt.Segment == 0 {
		return transcript.ForkPoint{}, "", fmt.Errorf("fork point: event seq %d of %s is in no verified segment", at.Seq, tr.ThreadID)
	}
	return pt, next, nil
}

// stepCheckpoint is the state checkpoint that ends step n with nothing
// pending (nil: none), the node it goes on to, and the steps the run
// checkpointed.
func stepCheckpoint(tr *transcript.Transcript, n int) (at *transcript.Event, next string, steps int) {
	for i := range tr.Events {
		e := &tr.Events[i]
		if e.Type != transcript.TypeStateCheckpoint {
			continue
		}
		var p transcript.StateCheckpoint
		if e.Decode(&p) != nil {
			continue
		}
		steps = max(steps, p.Step)
		if p.Step == n && (len(p.Pending) == 0 || string(p.Pending) == "null") {
			at, next = e, p.NextNode
		}
	}
	return at, next, steps
}

// childrenBy are the children a run had started by event seq: those its
// steps planned (step_started: a step's children from then on, whether or
// not a child_spawned follows) and those it spawned.
func childrenBy(tr *transcript.Transcript, seq int64) ([]string, error) {
	var kids []string
	for _, e := range tr.Events {
		if e.Seq > seq {
			break
		}
		switch e.Type {
		case transcript.TypeChildSpawned:
			var c transcript.ChildSpawned
			if err := e.Decode(&c); err != nil {
				return nil, fmt.Errorf("fork point: event seq %d (%s): %w", e.Seq, e.Type, err)
			}
			kids = appendNew(kids, c.ChildID)
		case transcript.TypeStepStarted:
			var s transcript.StepStarted
			if err := e.Decode(&s); err != nil {
				return nil, fmt.Errorf("fork point: event seq %d (%s): %w", e.Seq, e.Type, err)
			}
			for _, k := range sortedKeys(s.Children) {
				kids = appendNew(kids, s.Children[k])
			}
		}
	}
	return kids, nil
}

// graphFileWrites are the built-in file writes a graph run's tool steps
// made (tool_call_start and a tool_call_result that is not an error), as
// workspaceAt replays them.
func graphFileWrites(events []transcript.Event) []fileWrite {
	starts := map[string]transcript.ToolCallStart{}
	var out []fileWrite
	for _, e := range events {
		switch e.Type {
		case transcript.TypeToolCallStart:
			var s transcript.ToolCallStart
			if e.Decode(&s) == nil {
				starts[s.CallID] = s
			}
		case transcript.TypeToolCallResult:
			var r transcript.ToolCallResult
			if e.Decode(&r) != nil || r.IsError {
				continue
			}
			s, ok := starts[r.CallID]
			delete(starts, r.CallID)
			if !ok || s.Tool != tools.FSWriteID {
				continue
			}
			w, ok := decodeWrite(s.Input)
			if !ok {
				continue
			}
			w.at, w.seq = e.Timestamp.UnixNano(), e.Seq
			out = append(out, w)
		}
	}
	return out
}
