package orchestrator

import (
	"context"
	"errors"
	"fmt"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// GraphReplay is what ReplayGraph found: the run, the graph it was
// replayed against, and graph.Replay's report.
type GraphReplay struct {
	RunID string `json:"run_id"`
	Graph string `json:"graph"`
	// Against says which version of the graph: "current" (the project's
	// file now) or "pinned" (the version the run ran).
	Against string `json:"against"`
	graph.ReplayReport
	// Recorded is how many completed steps the run recorded.
	Recorded int `json:"recorded"`
}

// ErrNotReplayable refuses a replay of a run that does not start from its
// graph's start: a resumed run or a fork (replay the run they carry on).
var ErrNotReplayable = errors.New("not replayable")

// ReplayGraph replays run id against g (the run's pinned graph when nil)
// with graph.Replay, from the steps its transcript recorded: nothing runs,
// nothing is written. against names g for the report.
func (o *Orchestrator) ReplayGraph(ctx context.Context, id string, g *graph.Graph, against string) (*GraphReplay, error) {
	rec, err := o.reg.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !rec.IsGraph() {
		return nil, fmt.Errorf("%s: %w", id, ErrNotGraph)
	}
	if from := rec.PreviousThreadID + rec.ForkedFrom; from != "" {
		return nil, fmt.Errorf("%w: %s carries on run %s from a checkpoint, not from the graph's start; replay %s", ErrNotReplayable, id, from, from)
	}
	if g == nil {
		if _, g, err = o.pinnedGraph(ctx, rec); err != nil {
			return nil, err
		}
		against = "pinned"
	}
	tr, err := o.ReadTranscript(ctx, rec)
	if err != nil {
		return nil, err
	}
	steps := replaySteps(tr.Events)
	run := graph.ReplayRun{ID: rec.ThreadID, Graph: rec.Directive, Digest: rec.GraphDigest, ParentID: rec.ParentID, Inputs: rec.Inputs,
		StartedAt: rec.StartedAt, Outputs: rec.Outputs, Completed: rec.Status == thread.StatusCompleted}
	return &GraphReplay{RunID: rec.ThreadID, Graph: g.Name, Against: against, ReplayReport: graph.Replay(g, run, steps), Recorded: len(steps)}, nil
}

// replaySteps are the step_completed events of a run's transcript as
// graph.Replay reads them.
func replaySteps(events []transcript.Event) []graph.ReplayStep {
	var out []graph.ReplayStep
	for _, e := range events {
		if e.Type != transcript.TypeStepCompleted {
			continue
		}
		decoded(e, func(c transcript.StepCompleted) {
			s := graph.ReplayStep{Step: c.Step, Node: c.Node, Status: c.Status, RoutedBy: c.RoutedBy, NextNode: c.NextNode,
				Result: c.Result, Kept: len(c.Result) > 0 || c.ResultBytes == 0, ResultBytes: c.ResultBytes, Assigned: c.Assigned, Attempt: c.Attempt}
			if c.Error != nil {
				s.ErrorCode, s.ErrorMsg = c.Error.Code, c.Error.Message
			}
			out = append(out, s)
		})
	}
	return out
}
