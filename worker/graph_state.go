package worker

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/blobstore"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// graphCheckpoint is a graph run's durable walking state: the checkpoint
// record of the spec (state_checkpoint), kept in every segment's
// checkpoint (State.Extra["graph"]) so that any worker continues the run
// from its last segment.
type graphCheckpoint struct {
	// Step counts the steps completed (node visits and retry attempts);
	// the step in flight is Step+1.
	Step int `json:"step"`
	// NextNode is the node the run goes into next; "" once it has ended
	// (or an implicit return: a node without next).
	NextNode   string `json:"next_node"`
	StateSHA   string `json:"state_sha256"`
	StateBytes int    `json:"state_bytes"`
	// Attempt counts the failed attempts of NextNode's current retry
	// sequence, by node.
	Attempt          map[string]int `json:"attempt,omitempty"`
	SuppressedErrors int            `json:"suppressed_errors"`
	// Pending is the step in flight across activations: its planned
	// children and settled items.
	Pending *pendingStep `json:"pending"`
	// At is when this checkpoint was made: the logical start time
	// (run.started_at) of a step that starts from it.
	At time.Time `json:"at"`
	// RetryAt is when a step handed back for its retry's backoff runs.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// HooksDue is a step whose after_step hooks are yet to be recorded
	// (hook_fired): a recovering worker runs them again (at least once).
	HooksDue int `json:"hooks_due,omitempty"`
	// Final is set once the run's outcome is decided.
	Final *final `json:"final,omitempty"`
	// Taken is, by message name, the seq of the last message a
	// wait_message step took: each is taken once, in order.
	Taken map[string]int64 `json:"messages_taken,omitempty"`
}

// pendingStep is a step in flight: a child step (directive, graph), a
// foreach of children, an approval, a wait, a sleep; its Kind names the kind that
// answers for it (pendingKinds).
type pendingStep struct {
	Step      int       `json:"step"`
	Node      string    `json:"node"`
	Kind      string    `json:"kind"`
	Attempt   int       `json:"attempt"`
	StartedAt time.Time `json:"started_at"`
	// Children are the planned child ids by item index ("0" for an
	// action's one child), recorded (step_started) before any starts;
	// Slots are the settled items by index (foreach_item_completed),
	// each result a content-addressed object of its own (slot.SHA).
	// Neither is repeated in every checkpoint (a 1,000-item foreach
	// would make each checkpoint, and each restore, as large as all of
	// them): the events that record them are in the transcript a
	// restore reads, and pendingFrom rebuilds both from them.
	Children map[string]string `json:"-"`
	Slots    map[string]slot   `json:"-"`
	// Planned and Settled count them, for the record and as a check on
	// the rebuild.
	Planned int `json:"planned,omitempty"`
	Settled int `json:"settled,omitempty"`
	// NextItem is the first item not yet planned; Items the count.
	NextItem int `json:"next_item"`
	Items    int `json:"items,omitempty"`
	// Stopping: an item failed with on_item_error fail: no item starts,
	// and the step fails once the running ones have settled.
	Stopping bool `json:"stopping,omitempty"`
	// CallID is an approval's call id.
	CallID string `json:"call_id,omitempty"`
	// Threads are a wait node's children, in list order.
	Threads []string `json:"threads,omitempty"`
	// Approval is the pending call of an approval node or a gated tool.
	Approval *registry.PendingApproval `json:"approval,omitempty"`
	// WakeAt is when a sleep node's step wakes: fixed when the step
	// starts, so an activation that takes the run over sleeps no more
	// and no less.
	WakeAt time.Time `json:"wake_at,omitzero"`
	// Message is the name a wait_message step waits for; its WakeAt is
	// the wait's timeout (zero: none).
	Message string `json:"message,omitempty"`
}

// slot is a settled item.
type slot struct {
	Status string `json:"status"` // ok | error
	// SHA is the item result's SHA-256, Chunk the address of the stored
	// object of results that holds it (stepItems.flush).
	SHA      string `json:"sha256,omitempty"`
	Chunk    string `json:"results,omitempty"`
	Code     string `json:"code,omitempty"`
	Message  string `json:"message,omitempty"`
	ThreadID string `json:"thread_id,omitempty"`
}

// stateSnapshot is what a graph checkpoint stores as its content-addressed
// state object.
type stateSnapshot struct {
	State map[string]any `json:"state"`
}

// snapshotBytes encodes a snapshot canonically (encoding/json sorts map
// keys), with its content address.
func snapshotBytes(st map[string]any) ([]byte, string, error) {
	b, err := json.Marshal(stateSnapshot{State: st})
	if err != nil {
		return nil, "", err
	}
	sum := sha256.Sum256(b)
	return b, hex.EncodeToString(sum[:]), nil
}

// errStateInvalid: a checkpoint's state snapshot is missing, or is not
// the one the verified checkpoint names.
var errStateInvalid = errors.New("graph state does not verify")

// loadSnapshot reads the snapshot sha of run id and checks its address
// and, when tr is given, that a verified checkpoint of tr attests it.
func loadSnapshot(ctx context.Context, store blobstore.Store, id, sha string, tr *transcript.Transcript) (*stateSnapshot, error) {
	b, err := store.Get(ctx, blobkey.GraphState(id, sha))
	if errors.Is(err, blobstore.ErrNotFound) {
		return nil, fmt.Errorf("%w: snapshot %s of %s is missing", errStateInvalid, sha, id)
	}
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != sha {
		return nil, fmt.Errorf("%w: snapshot %s of %s has other content", errStateInvalid, sha, id)
	}
	if tr != nil && tr.Attested(transcript.ArtifactGraphState, b) == 0 {
		return nil, fmt.Errorf("%w: no verified checkpoint of %s attests snapshot %s", errStateInvalid, id, sha)
	}
	var snap stateSnapshot
	if err := json.Unmarshal(b, &snap); err != nil {
		return nil, fmt.Errorf("%w: snapshot %s of %s: %w", errStateInvalid, sha, id, err)
	}
	if snap.State == nil {
		snap.State = map[string]any{}
	}
	return &snap, nil
}

// checkpoint makes the run's walking state durable: the state snapshot
// (written once), then the registry's commit at the activation's version
// (the fence, with the cursor fields and a lease renewal when due), then
// the signed segment ending in state_checkpoint, attesting the snapshot.
func (r *graphRun) checkpoint(ctx context.Context) error {
	began := time.Now()
	r.cp.At = r.o.Now().UTC()
	if p := r.cp.Pending; p != nil {
		p.Planned, p.Settled = len(p.Children), len(p.Slots)
	}
	snap, sha, err := snapshotBytes(r.state)
	if err != nil {
		return fmt.Errorf("graph state of %s: %w", r.id(), err)
	}
	if err := r.store.PutIfAbsent(ctx, blobkey.GraphState(r.id(), sha), snap); err != nil && !errors.Is(err, blobstore.ErrExists) {
		return err
	}
	r.cp.StateSHA, r.cp.StateBytes = sha, len(snap)
	raw, err := json.Marshal(r.cp)
	if err != nil {
		return err
	}
	pend, _ := json.Marshal(r.cp.Pending)
	r.emit(transcript.TypeStateCheckpoint, transcript.StateCheckpoint{Step: r.cp.Step, NextNode: r.cp.NextNode,
		StateSHA256: sha, StateBytes: len(snap), Attempt: r.cp.Attempt, SuppressedErrors: r.cp.SuppressedErrors, Pending: pend})
	r.tw.Attest(transcript.ArtifactGraphState, snap)

	cost := r.cost()
	ch := registry.Changes{Cost: &cost, Transcript: orchestrator.RecordMark(r.tw.Mark()), Fields: r.cursorFields()}
	cp := orchestrator.Checkpoint{}
	if ttl := r.leaseTTL; ttl > 0 && r.ctl.renewalDue(ttl) {
		cp.Lease, cp.LeaseTTL = r.claim.Token, ttl
	}
	done, err := r.o.Checkpoint(ctx, r.rec, r.version, ch, cp)
	if err != nil {
		return err
	}
	r.version = done.Version
	if cp.Lease != "" && done.LeaseHeld {
		r.ctl.renewed.Store(time.Now().UnixNano())
	}
	if _, err := r.tw.Checkpoint(ctx, r.checkpointState(raw)); err != nil {
		return err
	}
	r.checkpointed = time.Now()
	r.w.metrics.checkpointed(time.Since(began))
	return nil
}

// cursorFields are the record's graph fields as of this checkpoint.
func (r *graphRun) cursorFields() map[string]string {
	node, done, total := r.cp.NextNode, 0, 0
	if p := r.cp.Pending; p != nil {
		node = p.Node
		done, total = len(p.Slots), p.Items
	}
	return map[string]string{
		registry.CurrentNodeField: node, registry.StepField: strconv.Itoa(r.cp.Step),
		registry.SuppressedErrorsField: strconv.Itoa(r.cp.SuppressedErrors), registry.StateSHA256Field: r.cp.StateSHA,
		registry.ItemsDoneField: strconv.Itoa(done), registry.ItemsTotalField: strconv.Itoa(total),
	}
}

// checkpointState is the transcript checkpoint's state for a graph run.
func (r *graphRun) checkpointState(raw json.RawMessage) transcript.State {
	st := transcript.State{Reason: transcript.ReasonAssistantTurn, Status: string(thread.StatusRunning), Iteration: r.cp.Step,
		Version: r.version, Cost: r.cost(), Extra: map[string]json.RawMessage{"graph": raw}}
	switch {
	case r.cp.Final != nil:
		st.Reason, st.Status, st.StopFlag = transcript.ReasonRunFinished, string(r.cp.Final.Status), true
	case r.cp.Pending != nil:
		st.Reason = r.cp.Pending.kind().reason()
	case !r.cp.RetryAt.IsZero():
		st.Reason = transcript.ReasonRetryWait
	}
	return st
}

// cost is the run's cost: its steps, and the time it has run.
func (r *graphRun) cost() thread.Cost {
	c := r.rec.Cost
	c.Steps = r.cp.Step
	if !r.rec.StartedAt.IsZero() {
		c.ElapsedSeconds = r.o.Now().Sub(r.rec.StartedAt).Seconds()
	}
	return c
}

// putResult stores an item's result as a content-addressed object of
// run id (written once, before the segment that names it) and returns
// its address.
func putResult(ctx context.Context, store blobstore.Store, id string, result any) (string, error) {
	b, err := json.Marshal(result)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	sha := hex.EncodeToString(sum[:])
	if err := store.PutIfAbsent(ctx, blobkey.GraphState(id, sha), b); err != nil && !errors.Is(err, blobstore.ErrExists) {
		return "", err
	}
	return sha, nil
}

// getResult reads the item result sha of run id, checking its address.
func getResult(ctx context.Context, store blobstore.Store, id, sha string) (any, error) {
	b, err := store.Get(ctx, blobkey.GraphState(id, sha))
	if err != nil {
		return nil, fmt.Errorf("%w: item result %s of %s: %w", errStateInvalid, sha, id, err)
	}
	sum := sha256.Sum256(b)
	if hex.EncodeToString(sum[:]) != sha {
		return nil, fmt.Errorf("%w: item result %s of %s has other content", errStateInvalid, sha, id)
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: item result %s of %s: %w", errStateInvalid, sha, id, err)
	}
	return v, nil
}

// pendingFrom rebuilds p's children and settled items from the events
// of its step in events (a restore's transcript): step_started's planned
// ids, foreach_item_completed's slots. A wait node's children are its
// threads.
func pendingFrom(p *pendingStep, events []transcript.Event) {
	p.Children, p.Slots = map[string]string{}, map[string]slot{}
	for i, id := range p.Threads {
		p.Children[strconv.Itoa(i)] = id
	}
	for _, e := range events {
		switch e.Type {
		case transcript.TypeStepStarted:
			var ev transcript.StepStarted
			if e.Decode(&ev) == nil && ev.Step == p.Step && ev.Node == p.Node {
				for k, id := range ev.Children {
					p.Children[k] = id
				}
			}
		case transcript.TypeForeachItemCompleted:
			var ev transcript.ForeachItemCompleted
			if e.Decode(&ev) == nil && ev.Step == p.Step && ev.Node == p.Node {
				sl := slot{Status: ev.Status, SHA: ev.ResultSHA256, Chunk: ev.Results, ThreadID: ev.ThreadID}
				if ev.Error != nil {
					sl.Code, sl.Message = ev.Error.Code, ev.Error.Message
				}
				p.Slots[strconv.Itoa(ev.Index)] = sl
			}
		}
	}
}
