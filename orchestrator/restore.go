package orchestrator

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// A thread Redis lost is restored from the blob store, never written off.
//
// Redis loses a suffix of its history (a crash short of its last second
// of AOF, a failover to a replica that had not received the last writes):
// a child registered in that suffix is gone from Redis whole (its record,
// its ledger entry, its charges in every ancestor, its task), while what
// it ran is in the store: its signed transcript, and thread.json, the
// registry record it was started with (the start's view) or ended with.
// Its parent's durable checkpoint still names it (child_spawned, a
// pending call), so the parent, a rerun of the parent's spawn (a planned
// start adopts it) and housekeeping (a pass over the children each
// transcript names) find it missing and restore it: Restore.
//
// What is restored, from the verified transcript and thread.json:
//
//   - a thread whose thread.json says it finished, with nothing in its
//     transcript after: its final record (status, result, outputs, error,
//     cost, continuation), at thread.json's version;
//   - any other: the record it was started with, status running, its
//     cost the last checkpoint's, its version past that checkpoint's by
//     VersionFence (no commit of an activation the loss cut off can match
//     again) and no lease, and a recover activation is enqueued: the
//     worker restores it from its last checkpoint, as after a crash;
//   - both: the transcript mark at the durable segments, the ledger entry
//     (admitted under its path, whatever room is left now: the thread ran),
//     every turn the transcript records charged under its idempotency key
//     (so the whole path gets the spend back, once), the entry released
//     if the thread finished; a continuation the record names is restored
//     too, and the threads waiting on a finished chain are woken.
//
// Without thread.json (a graph run writes none at its start; a worker
// that died before writing it), the record is built from the
// transcript's first event (thread_started, graph_started) and the
// parent's record (queue, ledger path, workspace). A thread that left no
// segment (lost before its first checkpoint) has nothing to restore:
// ErrNotDurable.

// ErrNotDurable is returned by Restore for a thread with no transcript
// segment in the store: Redis lost it before it made any turn durable.
var ErrNotDurable = errors.New("the thread has no durable transcript to restore it from")

// ErrNotRestorable is returned by Restore for a thread whose transcript
// verifies but does not make a record of the thread asked for: its
// record names another thread or parent, or there is neither a
// thread.json nor a start event to build one from. A transcript that does
// not verify is transcript's error (ErrTampered, ErrBadSignature,
// ErrUnknownKey).
var ErrNotRestorable = errors.New("the store holds no record of the thread to restore")

// VersionFence is how far past the last durable checkpoint's version a
// restored or reconciled thread's version is raised: past every version
// an activation cut off by Redis's loss may still hold (a few commits
// past its last segment), so that none of its commits can match again.
const VersionFence = 1000

// maxChain bounds the continuations Restore follows.
const maxChain = 1000

// Restored is what Restore did.
type Restored struct {
	// Record is the thread's record: as the registry held it, or restored.
	Record *registry.Record
	// Threads are the records Restore registered again: the thread's, and
	// its continuations'; none when the registry held the thread.
	Threads []*registry.Record
	// Transcripts are the verified transcripts of Threads, by id.
	Transcripts map[string]*transcript.Transcript
	// Charges counts the turn charges applied.
	Charges int
}

// restore is Housekeeper.Restore, which a planned start's adopt runs
// too: the record of thread id, a child of parent, restored from the blob
// store (see above) when the registry has none.
func (o *Orchestrator) restore(ctx context.Context, id, parent string) (*Restored, error) {
	rec, err := o.reg.Get(ctx, id)
	if err == nil {
		return &Restored{Record: rec}, nil
	}
	if !errors.Is(err, registry.ErrNotFound) {
		return nil, err
	}
	out := &Restored{Transcripts: map[string]*transcript.Transcript{}}
	next := id
	for range maxChain {
		got, tr, charges, err := o.restoreOne(ctx, next, parent)
		switch {
		case errors.Is(err, registry.ErrExists):
			// Restored meanwhile by another process.
			if got, err = o.reg.Get(ctx, next); err != nil {
				return nil, err
			}
		case err != nil && out.Record != nil:
			// The thread is back; a continuation of it that cannot be is
			// what its parent will find missing.
			o.threadLog(next).Warn("a continuation of a restored thread not restored", "error", err)
			return out, nil
		case err != nil:
			return nil, err
		default:
			out.Threads = append(out.Threads, got)
			out.Transcripts[next] = tr
			out.Charges += charges
		}
		if out.Record == nil {
			out.Record = got
		}
		next = got.ContinuationThreadID
		if next == "" || got.Status != thread.StatusContinued {
			return out, nil
		}
		if _, err := o.reg.Get(ctx, next); !errors.Is(err, registry.ErrNotFound) {
			return out, err
		}
	}
	return out, nil
}

// restoreOne restores thread id, which the registry lacks, and returns
// its record, its verified transcript and the number of charges applied.
// ErrExists when it was registered meanwhile.
func (o *Orchestrator) restoreOne(ctx context.Context, id, parent string) (*registry.Record, *transcript.Transcript, int, error) {
	tr, err := transcript.ReadWith(ctx, o.store, id, o.keyring, transcript.ReadOptions{Mode: transcript.Strict})
	if err != nil {
		return nil, nil, 0, fmt.Errorf("restore thread %s: %w", id, err)
	}
	if len(tr.Segments) == 0 {
		return nil, nil, 0, fmt.Errorf("restore thread %s: %w", id, ErrNotDurable)
	}
	rec, finished, err := o.restoredRecord(ctx, id, parent, tr)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("restore thread %s: %w", id, err)
	}
	charges, err := RecordedCharges(tr)
	if err != nil {
		return nil, nil, 0, err
	}
	if charges, err = o.uncharged(ctx, rec, charges); err != nil {
		return nil, nil, 0, err
	}
	got, err := o.runRestore(ctx, rec, charges, finished)
	if err != nil {
		return nil, nil, 0, err
	}
	log := o.threadLog(id)
	log.Warn("restored a thread Redis lost from its transcript", "parent_id", parent, "status", got.Status,
		"version", got.Version, "segments", got.Transcript.Segments, "charges", len(charges),
		"charged_usd", ChargedUSD(charges), "ledger_id", got.LedgerID())
	switch {
	case !got.Status.Terminal():
		// Its messages Redis lost with it come back before it runs.
		if _, err := o.Housekeeper().RestoreMessages(ctx, got, tr); err != nil {
			return got, tr, len(charges), err
		}
		// Its worker takes it up from its last checkpoint; should this
		// task be lost too, housekeeping finds it orphaned.
		if _, err := o.Reenqueue(ctx, queue.Activation{ThreadID: id, Reason: "recover"}, got.Version, got.Queue); err != nil {
			return got, tr, len(charges), err
		}
	case got.Status != thread.StatusContinued:
		wakes, err := o.acts.NotifyFinished(ctx, got.ChainRootID)
		if err != nil {
			return got, tr, len(charges), err
		}
		for _, w := range wakes {
			if err := o.enqueueWake(ctx, w); err != nil {
				return got, tr, len(charges), err
			}
		}
	}
	return got, tr, len(charges), nil
}

// uncharged are the charges of cs that rec's ledger entry lacks: all of
// them when the entry is gone.
func (o *Orchestrator) uncharged(ctx context.Context, rec *registry.Record, cs []TurnCharge) ([]TurnCharge, error) {
	out, err := o.lacking(ctx, rec, cs)
	if errors.Is(err, ledger.ErrNotFound) {
		return cs, nil
	}
	return out, err
}

// lacking are the charges of cs that rec's ledger entry lacks, in the
// order the ledger answers; ledger.ErrNotFound when the entry is gone.
func (o *Orchestrator) lacking(ctx context.Context, rec *registry.Record, cs []TurnCharge) ([]TurnCharge, error) {
	if len(cs) == 0 {
		return nil, nil
	}
	keys := make([]string, len(cs))
	byKey := make(map[string]TurnCharge, len(cs))
	for i, c := range cs {
		keys[i] = c.Key
		byKey[c.Key] = c
	}
	missing, err := o.ledger.Uncharged(ctx, rec.LedgerID(), keys)
	if err != nil {
		return nil, err
	}
	out := make([]TurnCharge, len(missing))
	for i, k := range missing {
		out[i] = byKey[k]
	}
	return out, nil
}

// restoreScript is restore.lua after the Lua functions it calls.
var restoreScript = redisfn.New("restore", ledger.Lua+registry.Lua, restoreLua)

//go:embed restore.lua
var restoreLua string

// runRestore runs restore.lua: rec's ledger entry, the charges, its
// release when the thread finished, and rec.
func (o *Orchestrator) runRestore(ctx context.Context, rec *registry.Record, charges []TurnCharge, finished bool) (*registry.Record, error) {
	g, err := o.reg.Restoration(rec)
	if err != nil {
		return nil, err
	}
	entry, path := rec.LedgerID(), rec.BudgetPath()
	ceil, err := ledger.ToNano(rec.Limits.Spend)
	if err != nil {
		return nil, fmt.Errorf("restore budget of %s: %w", entry, err)
	}
	lkeys, lids, err := o.ledger.PathArgs(entry, path)
	if err != nil {
		return nil, fmt.Errorf("restore budget of %s: %w", entry, err)
	}
	args := slices.Concat([]any{len(lkeys)}, lids, []any{ceil, len(charges)})
	for _, c := range charges {
		n, err := ledger.ToNano(c.Amount)
		if err != nil {
			return nil, fmt.Errorf("restore turn %d of %s: %w", c.Turn, rec.ThreadID, err)
		}
		args = append(args, c.Key, n)
	}
	release := ""
	if finished && rec.Status != thread.StatusContinued {
		release = string(rec.Status)
	}
	args = append(append(args, release, rec.TenantOrDefault()), g.Args...)
	res, err := restoreScript.Run(ctx, o.fast, slices.Concat(lkeys, g.Keys), args...).Result()
	if rerr := ledger.RefusalError("restore", entry, path, rec.Limits.Spend, err); rerr != nil {
		return nil, rerr
	}
	return g.Record(res, err)
}

// restoredRecord is the record thread id is restored with (see above),
// and whether it is a finished thread's.
func (o *Orchestrator) restoredRecord(ctx context.Context, id, parent string, tr *transcript.Transcript) (*registry.Record, bool, error) {
	var parentRec *registry.Record
	if parent != "" {
		p, err := o.reg.Get(ctx, parent)
		if err != nil {
			return nil, false, fmt.Errorf("parent: %w", err)
		}
		parentRec = p
	}
	tj, err := o.storedThreadJSON(ctx, id, tr)
	if err != nil {
		var ie *IntegrityError
		if !errors.As(err, &ie) {
			return nil, false, err
		}
		// The transcript verified; the view did not: the start is
		// rebuilt from the transcript.
		o.threadLog(id).Warn("restore: thread.json does not verify; the record is rebuilt from the transcript", "error", err)
		tj = nil
	}
	var rec registry.Record
	if tj != nil {
		rec = *tj
	} else if rec, err = o.startRecord(ctx, id, parentRec, tr); err != nil {
		return nil, false, err
	}
	if rec.ThreadID != id {
		return nil, false, fmt.Errorf("%w: its record names thread %q", ErrNotRestorable, rec.ThreadID)
	}
	if rec.ParentID != parent {
		return nil, false, fmt.Errorf("%w: its record names parent %q, not %q", ErrNotRestorable, rec.ParentID, parent)
	}
	now := o.Now().UTC()
	finished := tj != nil && tj.Status.Terminal() && tj.Transcript.Segments >= tr.LastSegment()
	if !finished {
		// Started, and where it stands is its last checkpoint: its worker
		// goes on from there.
		v := rec.Version
		if st := tr.LastState; st != nil {
			v = max(v, st.Version)
			rec.Cost = st.Cost
		}
		rec.Status, rec.Version, rec.Activation = thread.StatusRunning, v+VersionFence, max(rec.Activation, 1)
		rec.Result, rec.Outputs, rec.Error, rec.ContinuationThreadID = "", nil, nil, ""
	}
	rec.WaitingFor, rec.PendingApprovals, rec.Stalled = "", nil, nil
	rec.Transcript = registry.TranscriptMark{Segments: tr.LastSegment(), ChainHash: tr.Mark().ChainHash}
	rec.UpdatedAt = now
	extra := map[string]string{registry.RestoredField: now.Format(time.RFC3339Nano)}
	for k, v := range rec.Extra {
		extra[k] = v
	}
	rec.Extra = extra
	return &rec, finished, nil
}

// storedThreadJSON is thread id's thread.json, verified (signed, or
// attested by a checkpoint of tr); nil when there is none. One that does
// not verify is an *IntegrityError.
func (o *Orchestrator) storedThreadJSON(ctx context.Context, id string, tr *transcript.Transcript) (*registry.Record, error) {
	key := blobkey.ThreadJSON(id)
	data, err := o.store.Get(ctx, key)
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", key, err)
	}
	var tj registry.Record
	switch {
	case signedJSON(data):
		if _, err := transcript.VerifyJSON(data, o.keyring, &tj); err != nil {
			return nil, &IntegrityError{Key: key, Reason: "signature", Err: err}
		}
	case tr.Attested(transcript.ArtifactThreadJSON, data) == 0:
		return nil, &IntegrityError{Key: key, Reason: "attestation", Err: errNotAttested}
	default:
		if err := json.Unmarshal(data, &tj); err != nil {
			return nil, &IntegrityError{Key: key, Reason: "attested, but not a record", Err: err}
		}
	}
	return &tj, nil
}

// startRecord is the record of a thread as its transcript's first event
// (thread_started, graph_started) and its parent's record say it was
// started: for a thread without a thread.json to restore it from.
func (o *Orchestrator) startRecord(ctx context.Context, id string, parent *registry.Record, tr *transcript.Transcript) (registry.Record, error) {
	if len(tr.Events) == 0 {
		return registry.Record{}, fmt.Errorf("%w: its transcript has no events", ErrNotRestorable)
	}
	first := tr.Events[0]
	rec := registry.Record{ThreadID: id, Kind: registry.KindThread, ChainRootID: id, Activation: 1, Version: 1,
		CreatedAt: first.Timestamp, StartedAt: first.Timestamp}
	var err error
	switch first.Type {
	case transcript.TypeThreadStarted:
		err = o.threadStartRecord(ctx, first, &rec)
	case transcript.TypeGraphStarted:
		err = graphStartRecord(first, parent, &rec)
	default:
		return rec, fmt.Errorf("%w: no thread.json, and its transcript opens with %s, not a start", ErrNotRestorable, first.Type)
	}
	if err != nil {
		return rec, err
	}
	if parent != nil && rec.ParentID == parent.ThreadID {
		// A tree never crosses tenants: a child's are its parent's.
		rec.Queue, rec.ModelOverride = parent.Queue, parent.ModelOverride
		rec.Tenant, rec.Priority, rec.Tags = parent.TenantOrDefault(), parent.PriorityOrDefault(), parent.Tags
		rec.LedgerPath = append([]string{parent.LedgerID()}, parent.BudgetPath()...)
		if rec.Workspace == "" {
			rec.Workspace = parent.Workspace
		}
	}
	if rec.Queue == "" {
		rec.Queue = queue.DefaultQueue
	}
	return rec, nil
}

// threadStartRecord fills rec from a thread's first event, its
// thread_started: the directive, model, parent, capabilities, bundle,
// limits and inputs, and for a continuation the chain it continues, read
// from the record of the thread it continues.
func (o *Orchestrator) threadStartRecord(ctx context.Context, first transcript.Event, rec *registry.Record) error {
	var ev transcript.ThreadStarted
	if err := first.Decode(&ev); err != nil {
		return fmt.Errorf("thread_started: %w", err)
	}
	rec.Directive, rec.Model, rec.ParentID, rec.Capabilities, rec.Bundle = ev.Directive, ev.Model, ev.ParentID, ev.Capabilities, ev.BundleDigest
	rec.Tenant, rec.Priority, rec.Tags = thread.TenantOrDefault(ev.Tenant), thread.PriorityOrDefault(ev.Priority), ev.Tags
	if ev.Limits != nil {
		rec.Limits = *ev.Limits
	}
	if len(ev.Inputs) > 0 {
		if err := json.Unmarshal(ev.Inputs, &rec.Inputs); err != nil {
			return fmt.Errorf("thread_started inputs: %w", err)
		}
	}
	if ev.PreviousThreadID != "" {
		prev, err := o.reg.Get(ctx, ev.PreviousThreadID)
		if err != nil {
			return fmt.Errorf("the thread it continues: %w", err)
		}
		rec.PreviousThreadID, rec.ContinuationOf = prev.ThreadID, prev.ThreadID
		rec.ChainRootID, rec.ChainIndex, rec.Workspace = prev.LedgerID(), prev.ChainIndex+1, prev.Workspace
	}
	return nil
}

// graphStartRecord fills rec from a graph run's first event, its
// graph_started: the graph, its digest and bundle, capabilities, limits
// and step budget, inputs and start node. graph_started does not name
// the parent: it is parent's, when there is one.
func graphStartRecord(first transcript.Event, parent *registry.Record, rec *registry.Record) error {
	var ev transcript.GraphStarted
	if err := first.Decode(&ev); err != nil {
		return fmt.Errorf("graph_started: %w", err)
	}
	var lim struct {
		Limits   thread.Resolved `json:"limits"`
		MaxSteps int             `json:"max_steps"`
	}
	if len(ev.Limits) > 0 {
		if err := json.Unmarshal(ev.Limits, &lim); err != nil {
			return fmt.Errorf("graph_started limits: %w", err)
		}
	}
	if len(ev.Inputs) > 0 {
		if err := json.Unmarshal(ev.Inputs, &rec.Inputs); err != nil {
			return fmt.Errorf("graph_started inputs: %w", err)
		}
	}
	rec.Kind, rec.Directive, rec.GraphDigest, rec.Bundle = registry.KindGraph, ev.Graph, ev.GraphDigest, ev.Bundle
	rec.Capabilities, rec.Limits, rec.MaxSteps, rec.CurrentNode = ev.Capabilities, lim.Limits, lim.MaxSteps, ev.StartNode
	rec.Tenant, rec.Priority, rec.Tags = thread.TenantOrDefault(ev.Tenant), thread.PriorityOrDefault(ev.Priority), ev.Tags
	if parent != nil {
		rec.ParentID = parent.ThreadID
	}
	return nil
}

// NamedChildren are the threads tr says its thread started (child_spawned:
// a spawn, run_graph, a graph step's child), each once, in order.
func NamedChildren(tr *transcript.Transcript) []string {
	var out []string
	seen := map[string]bool{}
	for _, ev := range tr.Events {
		if ev.Type != transcript.TypeChildSpawned {
			continue
		}
		var c transcript.ChildSpawned
		if ev.Decode(&c) != nil || c.ChildID == "" || seen[c.ChildID] {
			continue
		}
		seen[c.ChildID] = true
		out = append(out, c.ChildID)
	}
	return out
}
