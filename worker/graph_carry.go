package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// GraphResumeField is the record field of a graph continuation run (a
// user's resume) or fork that carries its cursor and state edits, as
// JSON: {"from": NODE, "set": {KEY: VALUE}}.
const GraphResumeField = orchestrator.GraphResumeField

// graphEdits are a resume's or fork's --from and --set.
type graphEdits struct {
	From string         `json:"from,omitempty"`
	Set  map[string]any `json:"set,omitempty"`
}

// carry loads what a resumed or forked run carries over: the last
// verified checkpoint of the run it continues (its state, cursor and
// step counter, and its pending step's settled items), or, for a fork,
// the checkpoint after the step it was forked at; then applies the
// user's edits. A checkpoint that does not verify is
// resume_state_invalid.
func (r *graphRun) carry(ctx context.Context, ev *transcript.GraphStarted) error {
	src := carrySource{o: r.o, reg: r.reg, rec: r.rec}
	from, forkStep := src.from(ev)
	tr, cp, err := src.start(ctx, from, forkStep)
	if err != nil {
		return err
	}
	snap, err := loadSnapshot(ctx, r.store, from, cp.StateSHA, tr)
	if err != nil {
		return err
	}
	r.state = snap.State
	r.cp.Step, r.cp.NextNode, r.cp.SuppressedErrors = cp.Step, cp.NextNode, cp.SuppressedErrors
	if p := cp.Pending; p != nil && forkStep < 0 {
		if err := r.carryPending(ctx, from, p, tr); err != nil {
			return err
		}
	}
	if r.cp.Pending == nil && r.cp.NextNode == "" && cp.Final != nil && cp.Final.Error != nil {
		// A run that failed at a step: that step runs again.
		if e := lastFailedNode(tr); e != "" {
			r.cp.NextNode = e
		}
	}
	edits, err := src.edits(r.g, ev)
	if err != nil {
		return err
	}
	if edits.From != "" {
		r.cp.NextNode, r.cp.Pending = edits.From, nil
		r.items.clear()
	}
	for _, k := range ev.StateEdits {
		r.state[k] = edits.Set[k]
	}
	return nil
}

// carrySource is the run a resumed or forked graph run continues, as the
// continuation's record names it, and the user's edits of the resume.
type carrySource struct {
	o   *orchestrator.Runtime
	reg threadRecords
	rec *registry.Record
}

// carriedFrom is the run this one continues, and the step a fork was
// forked at (-1 for a resume), which ev records.
func (c carrySource) from(ev *transcript.GraphStarted) (from string, forkStep int) {
	if c.rec.ForkedFrom != "" {
		ev.ForkedFrom, ev.ForkStep = c.rec.ForkedFrom, c.rec.ForkTurn
		return c.rec.ForkedFrom, c.rec.ForkTurn
	}
	ev.ResumedFrom = c.rec.PreviousThreadID
	return c.rec.PreviousThreadID, -1
}

// carriedStart reads the verified transcript of run from and the
// checkpoint the continuation starts from (carriedCheckpoint). A resume
// of a run that ended in the middle of a step that had children (failed
// or cancelled there) starts from its last checkpoint with that step
// pending instead, which holds the items it settled, so that the resume
// keeps them.
func (c carrySource) start(ctx context.Context, from string, forkStep int) (*transcript.Transcript, *graphCheckpoint, error) {
	src, err := c.reg.Get(ctx, from)
	if err != nil {
		return nil, nil, fmt.Errorf("graph run %s continues %s: %w", c.rec.ThreadID, from, err)
	}
	tr, err := c.o.ReadVerified(ctx, src)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: the transcript of %s: %w", errStateInvalid, from, err)
	}
	cp, err := carriedCheckpoint(tr, forkStep)
	if err != nil {
		return nil, nil, err
	}
	if forkStep < 0 && cp.Pending == nil && cp.Final != nil {
		if p := lastPending(tr); p != nil && (p.Pending.Step == cp.Step || p.Pending.Step == cp.Step+1) {
			cp = p
		}
	}
	return tr, cp, nil
}

// carryPending carries over the step p that a resumed run left pending
// (failed or cancelled there), which runs again: as its kind carries it
// (a foreach or a wait keeps the items it settled ok), or from its node.
func (r *graphRun) carryPending(ctx context.Context, from string, p *pendingStep, tr *transcript.Transcript) error {
	if err := p.known(from); err != nil {
		return err
	}
	pendingFrom(p, tr.Events)
	r.items.clear()
	keep, err := p.kind().carry(ctx, r, from, p)
	if err != nil {
		return err
	}
	if keep == nil {
		r.cp.NextNode = p.Node
	}
	r.cp.Pending = keep
	return nil
}

// edits are the user's edits of a resume or fork (GraphResumeField),
// checked against g, which ev records: --from moves the cursor to a node
// of the graph, dropping any pending step; --set sets state keys, in the
// order of ev.StateEdits.
func (c carrySource) edits(g *graph.Graph, ev *transcript.GraphStarted) (graphEdits, error) {
	edits := graphEdits{}
	if raw := c.rec.Extra[GraphResumeField]; raw != "" {
		if err := json.Unmarshal([]byte(raw), &edits); err != nil {
			return edits, fmt.Errorf("graph run %s: %s: %w", c.rec.ThreadID, GraphResumeField, err)
		}
	}
	if edits.From != "" {
		if g.Node(edits.From) == nil {
			return edits, fmt.Errorf("graph run %s: --from %s: the graph has no such node", c.rec.ThreadID, edits.From)
		}
		ev.FromNode = edits.From
	}
	keys := make([]string, 0, len(edits.Set))
	for k := range edits.Set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	ev.StateEdits = keys
	return edits, nil
}

// carriedCheckpoint is the checkpoint a continuation starts from: the
// last one of tr, or (forkStep ≥ 0) the last one after step forkStep
// completed.
func carriedCheckpoint(tr *transcript.Transcript, forkStep int) (*graphCheckpoint, error) {
	var out *graphCheckpoint
	for _, e := range tr.Events {
		if e.Type != transcript.TypeCheckpoint {
			continue
		}
		var c transcript.Checkpoint
		if err := json.Unmarshal(e.Payload, &c); err != nil {
			continue
		}
		raw, ok := c.State.Extra["graph"]
		if !ok {
			continue
		}
		var g graphCheckpoint
		if err := json.Unmarshal(raw, &g); err != nil {
			return nil, fmt.Errorf("%w: a checkpoint of %s: %w", errStateInvalid, tr.ThreadID, err)
		}
		if forkStep >= 0 && (g.Step != forkStep || g.Pending != nil) {
			continue
		}
		out = &g
	}
	if out == nil {
		if forkStep >= 0 {
			return nil, fmt.Errorf("%w: %s has no checkpoint after step %d", errStateInvalid, tr.ThreadID, forkStep)
		}
		return nil, fmt.Errorf("%w: %s has no checkpoint", errStateInvalid, tr.ThreadID)
	}
	return out, nil
}

// lastPending is the last checkpoint of tr with a step in flight.
func lastPending(tr *transcript.Transcript) *graphCheckpoint {
	var out *graphCheckpoint
	for _, e := range tr.Events {
		if e.Type != transcript.TypeCheckpoint {
			continue
		}
		var c transcript.Checkpoint
		if json.Unmarshal(e.Payload, &c) != nil {
			continue
		}
		var g graphCheckpoint
		if raw, ok := c.State.Extra["graph"]; ok && json.Unmarshal(raw, &g) == nil && g.Pending != nil {
			out = &g
		}
	}
	return out
}

// lastFailedNode is the node of a run's last failed step ("" when none).
func lastFailedNode(tr *transcript.Transcript) string {
	node := ""
	for _, e := range tr.Events {
		if e.Type != transcript.TypeStepCompleted {
			continue
		}
		var sc transcript.StepCompleted
		if json.Unmarshal(e.Payload, &sc) == nil {
			node = ""
			if sc.Status == "error" && sc.RoutedBy == "fail" {
				node = sc.Node
			}
		}
	}
	return node
}
