package orchestrator

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
)

// PauseResult is what a pause or unpause request did
// (spooltype.PauseResult).
type PauseResult = spooltype.PauseResult

// Pause pauses run id (a thread or a graph run, followed along its
// continuation chain) and every unfinished descendant: a paused run's
// children are paused with it. With tree, the whole tree id belongs to
// is paused, from its root.
//
// A run that waits (on children, a decision, a message, a timer) is
// paused at once; one an activation holds pauses at its next boundary
// (before a turn, between graph steps: its last checkpoint), or when it
// suspends first; one not yet claimed, at the first boundary of the
// activation that claims it. A paused run holds no worker slot and no
// admission grant; what it waited for may come meanwhile (a child's end,
// a decision, a message), and is taken when it is unpaused. A child an
// activation spawns after the request is paused too (it inherits the
// request at its registration). An unknown id is registry.ErrNotFound; a
// run that has ended is ErrRunEnded.
func (o *Orchestrator) Pause(ctx context.Context, id string, tree bool) (*PauseResult, error) {
	top, err := o.pauseTarget(ctx, id, tree)
	if err != nil {
		return nil, err
	}
	res := &PauseResult{Success: true, ThreadID: top.ThreadID, PauseRequested: true}
	err = o.eachUnfinished(ctx, top, func(r *registry.Record) error {
		st, _, err := o.reg.RequestPause(ctx, r.ThreadID)
		if err != nil || st.Terminal() {
			return err
		}
		res.Runs++
		if st == thread.StatusPaused {
			res.Paused++
		}
		if r.ThreadID == top.ThreadID {
			res.Status = st
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	o.threadLog(top.ThreadID).Info("pause requested", "runs", res.Runs, "paused", res.Paused)
	return res, nil
}

// Unpause lets run id (followed along its continuation chain) and every
// unfinished descendant go on: each paused one continues where it was
// (woken now when what it waited for has come meanwhile, or it was paused
// at a boundary; else when it comes), and one that had not reached its
// boundary yet simply does not pause. With tree, the whole tree id
// belongs to, from its root. Unpausing a run that is not paused changes
// nothing. An unknown id is registry.ErrNotFound; a run that has ended is
// ErrRunEnded.
func (o *Orchestrator) Unpause(ctx context.Context, id string, tree bool) (*PauseResult, error) {
	top, err := o.pauseTarget(ctx, id, tree)
	if err != nil {
		return nil, err
	}
	res := &PauseResult{Success: true, ThreadID: top.ThreadID}
	err = o.eachUnfinished(ctx, top, func(r *registry.Record) error {
		st, seq, err := o.reg.Unpause(ctx, r.ThreadID)
		if err != nil || st.Terminal() {
			return err
		}
		res.Runs++
		if r.ThreadID == top.ThreadID {
			res.Status = st
		}
		if seq == 0 {
			return nil
		}
		// What it waits for may have come while it was paused (or it
		// was paused at a boundary): wake it now. Should this die first,
		// housekeeping finds the wake-up due (StalledWaits).
		wakes, err := o.acts.WakeDue(ctx, r.ThreadID)
		if err != nil {
			return err
		}
		for _, w := range wakes {
			if err := o.enqueueWake(ctx, w); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	o.threadLog(top.ThreadID).Info("unpaused", "runs", res.Runs)
	return res, nil
}

// pauseTarget is the run a pause or unpause of id acts on: the thread
// id's chain has reached, or with tree the one its tree's root's chain
// has; ErrRunEnded when that one has ended.
func (o *Orchestrator) pauseTarget(ctx context.Context, id string, tree bool) (*registry.Record, error) {
	rec, err := o.reg.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if tree && len(rec.Ancestors) > 0 {
		id = rec.Ancestors[0]
	}
	top, err := o.Latest(ctx, id)
	if err != nil {
		return nil, err
	}
	if top.Status.Terminal() {
		return nil, fmt.Errorf("%w: %s %s has ended (%s)", ErrRunEnded, runNoun(top), top.ThreadID, top.Status)
	}
	return top, nil
}

// runNoun names what kind of run rec is, for messages.
func runNoun(rec *registry.Record) string {
	if rec.IsGraph() {
		return "graph run"
	}
	return "thread"
}

// eachUnfinished calls fn for top and each unfinished descendant of it,
// parents before their children (a child registered while this runs
// inherits a pause request from its parent at registration). The records
// are those the parent's children listing read: fn acts by id, its
// scripts reading the status as it is then. A continued thread is not
// passed, but its children are walked.
func (o *Orchestrator) eachUnfinished(ctx context.Context, top *registry.Record, fn func(*registry.Record) error) error {
	queue := []*registry.Record{top}
	seen := map[string]bool{top.ThreadID: true}
	for len(queue) > 0 {
		rec := queue[0]
		queue = queue[1:]
		if !rec.Status.Terminal() {
			if err := fn(rec); err != nil {
				return err
			}
		}
		kids, err := o.reg.ListChildren(ctx, rec.ThreadID)
		if err != nil {
			return err
		}
		for _, k := range kids {
			if !seen[k.ThreadID] && (!k.Status.Terminal() || k.Status == thread.StatusContinued) {
				seen[k.ThreadID] = true
				queue = append(queue, k)
			}
		}
	}
	return nil
}

// PausedSince is when the paused run r was paused (zero when its record
// does not say) and what it waited for then ("" when its activation
// paused it at a boundary); ok is false when r is not paused.
func PausedSince(r *registry.Record) (at time.Time, from string, ok bool) {
	if r.Status != thread.StatusPaused {
		return time.Time{}, "", false
	}
	if ms, err := strconv.ParseInt(r.Extra[registry.PausedAtField], 10, 64); err == nil {
		at = time.UnixMilli(ms)
	}
	return at, r.Extra[registry.PausedFromField], true
}
