package worker

import (
	"context"
	"errors"
	"log/slog"

	"github.com/spool-run/spool/graph"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// childChains are where the children of a run's pending step stand, as
// this activation read them: which children its transcript records as
// started (child_spawned), and, for each child the last settle read, the
// thread its chain has reached (a child that handed off lives on in its
// continuation), which is what a suspension or a hold watches. It reads
// the registry and restores a lost child; it writes only the run's
// transcript.
type childChains struct {
	reg threadRecords
	o   *orchestrator.Runtime
	log *slog.Logger
	// run is the run's id, the parent of its children.
	run string
	// emit appends an event to the run's transcript.
	emit func(typ string, payload any)

	// spawned are the children whose start the transcript records: a
	// child started by an activation that died before recording it is
	// recorded when found (end).
	spawned map[string]bool
	// terminal is, for each child of the last read, the thread its chain
	// has reached.
	terminal map[string]string
}

// restored reads from a restored transcript's events the children it
// records as started.
func (c *childChains) restored(events []transcript.Event) {
	c.spawned = map[string]bool{}
	for _, e := range events {
		var ev transcript.ChildSpawned
		if e.Type == transcript.TypeChildSpawned && e.Decode(&ev) == nil {
			c.spawned[ev.ChildID] = true
		}
	}
}

// started records child rec of action a as started (child_spawned), once.
func (c *childChains) started(a *graph.Action, rec *registry.Record, async bool) {
	if c.spawned[rec.ThreadID] {
		return
	}
	if c.spawned == nil {
		c.spawned = map[string]bool{}
	}
	c.spawned[rec.ThreadID] = true
	c.emit(transcript.TypeChildSpawned, transcript.ChildSpawned{ChildID: rec.ThreadID, Directive: a.ID(), Async: async})
}

// read reads the children of the open items of p in one round trip: the
// status of each registered one, and the records of those that ended, by
// id. It forgets the chains of the last read: end records them again.
func (c *childChains) read(ctx context.Context, p *pendingStep, open []string) (map[string]thread.Status, map[string]*registry.Record, error) {
	ids := make([]string, len(open))
	for j, i := range open {
		ids[j] = p.Children[i]
	}
	statuses, err := c.reg.Statuses(ctx, ids)
	if err != nil {
		return nil, nil, err
	}
	var ended []string
	for _, id := range ids {
		if st, ok := statuses[id]; ok && st.Terminal() {
			ended = append(ended, id)
		}
	}
	recs, err := c.reg.GetMany(ctx, ended)
	if err != nil {
		return nil, nil, err
	}
	byID := make(map[string]*registry.Record, len(recs))
	for _, rec := range recs {
		byID[rec.ThreadID] = rec
	}
	c.terminal = make(map[string]string, len(open))
	return statuses, byID, nil
}

// end is where the chain of child id stands: the record of its terminal
// thread, which terminal keeps as what a suspension watches
// (ErrChainMoved, should it move on meanwhile), or nil when the child is
// not in the registry. st is the child's status if it is registered, rec
// its record if it ended (read). running: registered and running. A
// child that an activation started and died before recording is recorded
// now; a wait's thread that Redis lost is restored from the store, if it
// left a transcript there.
func (c *childChains) end(ctx context.Context, p *pendingStep, id string, st thread.Status, registered bool, rec *registry.Record) (_ *registry.Record, running bool, err error) {
	if registered && !c.spawned[id] {
		// Started by an activation that died before recording it.
		c.started(&graph.Action{Directive: thread.DirectiveFromID(id)}, &registry.Record{ThreadID: id}, false)
	}
	if registered && rec == nil {
		// Registered and running: its chain is where it is.
		c.terminal[id] = id
		if !st.Terminal() {
			return nil, true, nil
		}
	}
	if !registered && !p.children().plans() {
		// A thread an earlier step started, which Redis lost (a
		// failover short of its last writes): restored from the
		// store, or thread_lost when it left nothing there.
		got, err := restoreLost(ctx, c.o, c.log, id, c.run)
		if err != nil && !errors.Is(err, registry.ErrNotFound) {
			return nil, false, err
		}
		rec = got
	}
	if rec != nil && rec.Status == thread.StatusContinued {
		if rec, err = c.chainTerminal(ctx, id); err != nil {
			return nil, false, err
		}
	}
	if rec != nil {
		c.terminal[id] = rec.ThreadID
	}
	return rec, false, nil
}

// chainTerminal is the record of the terminal thread of the chain of a
// child that handed off; nil when Redis has none.
func (c *childChains) chainTerminal(ctx context.Context, id string) (*registry.Record, error) {
	term, err := c.reg.ResolveChain(ctx, id)
	if err != nil {
		return nil, err
	}
	rec, err := c.reg.Get(ctx, term)
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return nil, err
	}
	return rec, nil
}

// targets are what a suspension on children ids waits for: each one's
// chain, to the thread it has reached.
func (c *childChains) targets(ctx context.Context, ids []string) ([]registry.WaitTarget, error) {
	targets := make([]registry.WaitTarget, 0, len(ids))
	for _, id := range ids {
		term, ok := c.terminal[id]
		if !ok {
			var err error
			if term, err = c.reg.ResolveChain(ctx, id); err != nil {
				return nil, err
			}
		}
		targets = append(targets, registry.WaitTarget{Root: id, Terminal: term})
	}
	return targets, nil
}

// watch is the set of threads whose end a hold on children running
// waits for: each child, and the thread its chain has reached.
func (c *childChains) watch(running []string) map[string]bool {
	watch := make(map[string]bool, 2*len(running))
	for _, id := range running {
		watch[id] = true
		if t, ok := c.terminal[id]; ok {
			watch[t] = true
		}
	}
	return watch
}
