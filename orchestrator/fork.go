package orchestrator

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// ForkRequest asks for a fork of a thread at one of its turns.
type ForkRequest struct {
	// ThreadID is the thread to fork, AtTurn the turn (from 1) whose end
	// the fork's conversation reaches.
	ThreadID string
	AtTurn   int
	// Message, when set, is the user message the fork adds after the
	// prefix.
	Message string
	// Model, when set, is the fork's model; default the source's.
	Model string
	// Script is the script of a "script:PATH" Model, when the source's
	// bundle may not hold it: the fork's bundle is the source's with it
	// added (a thread runs the scripts its bundle holds).
	Script []byte
}

// ForkResult is what Fork did.
type ForkResult struct {
	ForkedFrom string `json:"forked_from"`
	ForkTurn   int    `json:"fork_turn"`
	// Turns is how many model turns the source had recorded.
	Turns int `json:"turns"`
	// SourceSegment and SourceChainHash name the source's transcript
	// segment that holds the end of the turn, as the fork's
	// thread_forked event does.
	SourceSegment   int64  `json:"source_segment"`
	SourceChainHash string `json:"source_chain_hash"`
	// Budget is the fork's spend ceiling: what the source's chain had
	// left at the end of the turn, at most what the parent has left.
	Budget float64 `json:"budget"`
	// WorkspaceFiles is how many files the fork's workspace starts with.
	WorkspaceFiles int              `json:"workspace_files"`
	Thread         *registry.Record `json:"thread"`
}

// ForkStart is what Start needs to start a fork (StartRequest.Fork).
type ForkStart struct {
	// From is the source thread's record, Point where its transcript is
	// cut.
	From  *registry.Record
	Point transcript.ForkPoint
	// Left is what From's chain had left at Point (forkBudget).
	Left float64
	// Message is the message the fork adds.
	Message string
	// ModelOverride is the fork's tree model (registry.Record.ModelOverride).
	ModelOverride string
}

// Fork starts a new thread whose conversation is thread req.ThreadID's,
// verified, up to the end of turn req.AtTurn, plus req.Message: a sibling
// of the thread (the same parent, directive, inputs, bundle and limits),
// first of a chain of its own, listed as its fork (ListForks). The source
// is left as it is. Choices made here (the package doc says why):
//
//   - The source's transcript, thread.json and capabilities.md are
//     verified strictly whatever the project's transcript_integrity: a
//     fork starts from nothing that does not verify (ErrTampered).
//   - The fork's worker reads the prefix again, verified, and refuses it
//     unless the segment that ends the turn still has the chain hash Fork
//     recorded; nothing of the prefix runs again (tool calls and their
//     results are carried as they were recorded).
//   - Budget: the fork carries what the source's chain had left at the
//     end of the turn (forkBudget), never a fresh default, in a ledger
//     entry of its own: a root's fork is registered with it as its
//     ceiling, a child's is admitted under the child's parent with at
//     most what the parent has left (and is refused when the parent has
//     finished: its budget takes no new children).
//   - Workspace: the fork gets a workspace of its own, made at fork time
//     as the source's workspace was at the end of the turn by replaying
//     the built-in file writes recorded up to then (workspaceAt).
func (o *Orchestrator) Fork(ctx context.Context, req ForkRequest) (*ForkResult, error) {
	src, pt, err := o.forkPoint(ctx, req)
	if err != nil {
		return nil, err
	}
	left, err := o.forkBudget(ctx, src, pt)
	if err != nil {
		return nil, fmt.Errorf("fork %s: %w", src.ThreadID, err)
	}
	files, err := o.workspaceAt(ctx, src, pt, 0)
	if err != nil {
		return nil, fmt.Errorf("fork %s: workspace at turn %d: %w", src.ThreadID, pt.Turn, err)
	}
	model, override := req.Model, req.Model
	if model == "" {
		model, override = src.Model, src.ModelOverride
	}
	bundle, err := o.forkBundle(ctx, src, req)
	if err != nil {
		return nil, err
	}
	id := o.newID(IDRequest{Directive: src.Directive, ParentID: src.ParentID})
	rec, err := o.startFork(ctx, src, files, StartRequest{
		ID: id, Directive: src.Directive, Inputs: src.Inputs, Model: model, ParentID: src.ParentID, Bundle: bundle, Queue: src.Queue,
		Fork: &ForkStart{From: src, Point: pt, Left: left, Message: req.Message, ModelOverride: override},
	})
	if err != nil {
		return nil, err
	}
	o.threadLog(id).Info("thread forked", "forked_from", src.ThreadID, "fork_turn", pt.Turn, "budget", rec.Limits.Spend, "workspace_files", len(files))
	return &ForkResult{ForkedFrom: src.ThreadID, ForkTurn: pt.Turn, Turns: pt.Turns, SourceSegment: pt.Segment, SourceChainHash: pt.ChainHash,
		Budget: rec.Limits.Spend, WorkspaceFiles: len(files), Thread: rec}, nil
}

// startFork lists fork sr.ID of src, writes the files its workspace starts
// with and starts it (sr); a start that fails takes the files back.
func (o *Orchestrator) startFork(ctx context.Context, src *registry.Record, files map[string][]byte, sr StartRequest) (*registry.Record, error) {
	// Listed before it exists, so a fork is never missing from the list.
	if err := o.reg.AddFork(ctx, src.ThreadID, sr.ID); err != nil {
		return nil, err
	}
	for p, data := range files {
		if err := o.store.Put(ctx, blobkey.WorkspaceFile(sr.ID, p), data); err != nil {
			return nil, fmt.Errorf("fork %s: workspace: %w", src.ThreadID, err)
		}
	}
	rec, err := o.Start(ctx, sr)
	if err != nil {
		for p := range files {
			_ = o.store.Delete(context.WithoutCancel(ctx), blobkey.WorkspaceFile(sr.ID, p))
		}
		return nil, fmt.Errorf("fork %s: %w", src.ThreadID, err)
	}
	return rec, nil
}

// forkPoint verifies the thread req forks (strictly) and cuts its
// transcript at req.AtTurn: the source's record as verified, and the cut.
func (o *Orchestrator) forkPoint(ctx context.Context, req ForkRequest) (*registry.Record, transcript.ForkPoint, error) {
	if req.AtTurn < 1 {
		return nil, transcript.ForkPoint{}, &transcript.TurnError{ThreadID: req.ThreadID, Turn: req.AtTurn}
	}
	src, err := o.reg.Get(ctx, req.ThreadID)
	if err != nil {
		return nil, transcript.ForkPoint{}, err
	}
	v, err := o.VerifyThread(ctx, src.ThreadID, transcript.Strict)
	if err != nil {
		return nil, transcript.ForkPoint{}, fmt.Errorf("fork %s: %w", src.ThreadID, err)
	}
	src = v.Record()
	pt, err := v.Transcript.ForkAt(req.AtTurn)
	if err != nil {
		return nil, transcript.ForkPoint{}, err
	}
	return src, pt, nil
}

// forkBundle is the bundle a fork runs on: src's, or, when req brings the
// script of a script model, a copy of it with that script.
func (o *Orchestrator) forkBundle(ctx context.Context, src *registry.Record, req ForkRequest) (string, error) {
	p, ok := config.ScriptPath(req.Model)
	if !ok || req.Script == nil {
		return src.Bundle, nil
	}
	proj, err := o.Project(ctx, src.Bundle)
	if err != nil {
		return "", err
	}
	bundle, err := proj.Bundle.CopyTo(ctx, o.store, map[string][]byte{p: req.Script})
	if err != nil {
		return "", fmt.Errorf("fork %s: bundle the script of %s: %w", src.ThreadID, req.Model, err)
	}
	return bundle, nil
}

// forkBudget is what src's chain had left at the end of the turn pt cuts
// at: the chain's ceiling (its ledger entry's max) less what the chain had
// spent by then: the own spend of the chain's threads before src, src's
// turns up to the cut (their cognition_out spend), and the subtree spend
// of every child those threads started by then (its ledger entry's
// actual, which counts what an asynchronous child spent after the cut
// too: it was started before it). Nothing left is spend_exceeded.
func (o *Orchestrator) forkBudget(ctx context.Context, src *registry.Record, pt transcript.ForkPoint) (float64, error) {
	entry, err := o.ledger.Get(ctx, src.LedgerID())
	if err != nil {
		return 0, err
	}
	chain, err := o.reg.GetChain(ctx, src.ThreadID)
	if err != nil {
		return 0, err
	}
	spent, err := ledger.ToNano(pt.Spend)
	if err != nil {
		return 0, err
	}
	kids := append([]string(nil), pt.Children...)
	for _, l := range chain {
		if l.ThreadID == src.ThreadID {
			break
		}
		n, err := ledger.ToNano(l.Cost.Spend)
		if err != nil {
			return 0, err
		}
		spent += n
		cs, err := o.reg.ListChildren(ctx, l.ThreadID)
		if err != nil {
			return 0, err
		}
		for _, c := range cs {
			if c.ContinuationOf == "" && c.ForkedFrom == "" {
				kids = append(kids, c.LedgerID())
			}
		}
	}
	entries, err := o.ledger.GetMany(ctx, kids)
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		spent += e.ActualNano
	}
	left := entry.MaxNano - spent
	if left <= 0 {
		return 0, &thread.LimitError{Code: thread.CodeSpendExceeded, Current: ledger.FromNano(spent), Max: entry.Max,
			Message: fmt.Sprintf("the chain of %s had spent %g of its %g USD by the end of turn %d: nothing is left for a fork",
				src.ThreadID, ledger.FromNano(spent), entry.Max, pt.Turn)}
	}
	return ledger.FromNano(left), nil
}

// planForkBudget is the ledger step of a fork (planBudget): an entry of
// its own with f.Left as its ceiling, registered for a root's fork,
// admitted under the parent (at most what the parent has left) for a
// child's.
func (o *Orchestrator) planForkBudget(ctx context.Context, id string, parent *registry.Record, f *ForkStart, limits *thread.Resolved) (budgetPlan, error) {
	limits.Spend = f.Left
	if parent == nil {
		return registerBudget(id, f.Left), nil
	}
	room, err := o.ledger.Room(ctx, parent.LedgerID(), parent.BudgetPath())
	if err != nil {
		return budgetPlan{}, err
	}
	if room.Status != "" && room.Status != "active" {
		return budgetPlan{}, fmt.Errorf("%w: the parent %s of %s has finished (%s), and a fork of a child is admitted under its parent's budget",
			ledger.ErrReleased, parent.ThreadID, f.From.ThreadID, room.Status)
	}
	if room.LeftNano <= 0 {
		return budgetPlan{}, ledger.Exhausted(parent.LedgerID(), room.Limiter)
	}
	limits.Spend = min(f.Left, room.Left)
	path := append([]string{parent.LedgerID()}, parent.BudgetPath()...)
	return admitBudget(id, path, limits.Spend, false), nil
}

// maxWorkspaceThreads bounds the threads whose transcripts workspaceAt
// reads.
const maxWorkspaceThreads = 2000

// fileWrite is one built-in file write a transcript recorded.
type fileWrite struct {
	at      int64 // result's timestamp, Unix ns
	order   int   // thread order, then seq, for equal times
	seq     int64
	path    string
	mode    string
	content string
}

// workspaceAt returns the files of src's workspace as they were at the end
// of the turn pt cuts at (path → content). The store keeps no snapshots,
// so it replays the built-in fs_write calls that succeeded, in the order
// of their results' timestamps, up to the cut's: those of every thread
// that shares the workspace (the tree's, or a fork's own), each recorded
// in its signed transcript, on top of the files a fork's workspace
// started with (the same, from the thread it was forked from, recursively).
// It is exact for the built-in file tools; anything else that changed the
// world (external tools) is not replayed. Times are the workers' clocks.
func (o *Orchestrator) workspaceAt(ctx context.Context, src *registry.Record, pt transcript.ForkPoint, depth int) (map[string][]byte, error) {
	if depth > 32 {
		return nil, errors.New("forks nested more than 32 deep")
	}
	ws := src.WorkspaceID()
	owner, err := o.reg.Get(ctx, ws)
	if err != nil {
		return nil, err
	}
	files, err := o.forkedFiles(ctx, owner, depth)
	if err != nil {
		return nil, err
	}
	recs, err := o.workspaceThreads(ctx, owner, ws)
	if err != nil {
		return nil, err
	}
	cut := pt.Time.UnixNano()
	var writes []fileWrite
	for i, r := range recs {
		w, err := o.writesUpTo(ctx, r, i, cut)
		if err != nil {
			return nil, err
		}
		writes = append(writes, w...)
	}
	slices.SortFunc(writes, func(a, b fileWrite) int {
		return cmp.Or(cmp.Compare(a.at, b.at), cmp.Compare(a.order, b.order), cmp.Compare(a.seq, b.seq))
	})
	for _, w := range writes {
		switch w.mode {
		case "append":
			files[w.path] = append(append([]byte(nil), files[w.path]...), w.content...)
		default: // overwrite, create
			files[w.path] = []byte(w.content)
		}
	}
	return files, nil
}

// forkedFiles are the files workspace owner started with: none, unless
// it is a fork's own workspace, which starts with the files of the
// workspace it was forked from at its fork's turn (workspaceAt, one level
// deeper).
func (o *Orchestrator) forkedFiles(ctx context.Context, owner *registry.Record, depth int) (map[string][]byte, error) {
	if owner.ForkedFrom == "" || owner.Workspace != owner.ThreadID {
		return map[string][]byte{}, nil
	}
	from, err := o.reg.Get(ctx, owner.ForkedFrom)
	if err != nil {
		return nil, err
	}
	tr, err := o.readHeld(ctx, from, transcript.Strict)
	if err != nil {
		return nil, err
	}
	var fpt transcript.ForkPoint
	if owner.IsGraph() {
		fpt, _, err = graphForkAt(tr, owner.ForkTurn)
	} else {
		fpt, err = tr.ForkAt(owner.ForkTurn)
	}
	if err != nil {
		return nil, err
	}
	return o.workspaceAt(ctx, from, fpt, depth+1)
}

// workspaceThreads are the threads of workspace ws, whose owner is
// owner: its chain, their children and continuations, recursively (a
// child fork has a workspace of its own, and so do its descendants), at
// most maxWorkspaceThreads.
func (o *Orchestrator) workspaceThreads(ctx context.Context, owner *registry.Record, ws string) ([]*registry.Record, error) {
	var recs []*registry.Record
	seen := map[string]bool{}
	todo := []*registry.Record{owner}
	for len(todo) > 0 {
		r := todo[0]
		todo = todo[1:]
		if seen[r.ThreadID] || r.WorkspaceID() != ws {
			continue
		}
		seen[r.ThreadID] = true
		if len(recs) == maxWorkspaceThreads {
			return nil, fmt.Errorf("more than %d threads share workspace %s", maxWorkspaceThreads, ws)
		}
		recs = append(recs, r)
		kids, err := o.reg.ListChildren(ctx, r.ThreadID)
		if err != nil {
			return nil, err
		}
		todo = append(todo, kids...)
		if r.ContinuationThreadID != "" {
			next, err := o.reg.Get(ctx, r.ContinuationThreadID)
			if err != nil && !errors.Is(err, registry.ErrNotFound) {
				return nil, err
			}
			if next != nil {
				todo = append(todo, next)
			}
		}
	}
	return recs, nil
}

// writesUpTo are the file writes thread r (the order-th of its workspace)
// recorded with a result at or before cut (Unix ns): a graph run's tool
// steps, or a thread's fs_write calls that succeeded.
func (o *Orchestrator) writesUpTo(ctx context.Context, r *registry.Record, order int, cut int64) ([]fileWrite, error) {
	tr, err := o.readHeld(ctx, r, transcript.Strict)
	if err != nil {
		return nil, err
	}
	var writes []fileWrite
	if r.IsGraph() {
		// A graph run's tool steps are no model turns.
		for _, w := range graphFileWrites(tr.Events) {
			if w.at <= cut {
				w.order = order
				writes = append(writes, w)
			}
		}
		return writes, nil
	}
	turns, err := transcript.Turns(tr.Events)
	if err != nil {
		return nil, err
	}
	for _, t := range turns {
		for _, c := range t.Out.ToolCalls {
			res, at, ok := t.Result(c.ID)
			if !ok || res.IsError || res.Tool != tools.FSWriteID || at.UnixNano() > cut {
				continue
			}
			w, ok := decodeWrite(c.Input)
			if !ok {
				continue
			}
			w.at, w.order, w.seq = at.UnixNano(), order, t.Seq
			writes = append(writes, w)
		}
	}
	return writes, nil
}

// decodeWrite reads an fs_write call's input as the tool does.
func decodeWrite(input []byte) (fileWrite, bool) {
	var in struct {
		Path    string  `json:"path"`
		Content *string `json:"content"`
		Mode    string  `json:"mode"`
	}
	if err := json.Unmarshal(input, &in); err != nil || in.Content == nil {
		return fileWrite{}, false
	}
	p, err := tools.CleanPath(in.Path)
	if err != nil {
		return fileWrite{}, false
	}
	mode := strings.TrimSpace(in.Mode)
	if mode == "" {
		mode = "overwrite"
	}
	return fileWrite{path: p, mode: mode, content: *in.Content}, true
}
