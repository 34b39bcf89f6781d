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
	"github.com/spool-run/spool/config"
	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/ledger"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/tools"
	"github.com/spool-run/spool/transcript"
)

// Outcome is how a thread ends.
type Outcome struct {
	Status  thread.Status
	Result  string
	Outputs map[string]any
	Error   *registry.ErrorInfo
	Cost    thread.Cost
	// ContinuationID links a continued thread to its continuation.
	ContinuationID string
	// Transcript is the mark of the thread's transcript with its final
	// segment written (transcript.Writer.Mark): Finalize records it in
	// the registry and thread.json. Nil when the caller wrote no final
	// segment (a created or waiting thread that no worker holds):
	// Finalize reads the transcript to find it.
	Transcript *transcript.Mark
	// Charge is the last turn's spend, not yet charged to the ledger
	// (a worker's final checkpoint leaves it to Finalize); nil: none.
	Charge *Charge
	// Lease is the token of the activation lease the caller holds:
	// Finalize releases it with the end; "": none.
	Lease string
	// ThreadJSON is the thread.json the caller's final checkpoint
	// attests (AttestFinal): written instead of a signed one when the
	// commit lands at its version; nil: Finalize signs one.
	ThreadJSON *AttestedThreadJSON
}

// Charge is a ledger charge under an idempotency key (ledger.Charge).
type Charge struct {
	Key    string
	Amount float64
	// Done, when set, gets the charge's outcome: the entry, and a
	// spend_exceeded *thread.LimitError when it was clamped (which does
	// not stop the finalization: the thread has ended anyway).
	Done func(ledger.Charged, error)
}

// afterCommitTimeout bounds what Finalize does after its script committed
// the end (thread.json, waking waiters, cascading a cancel), on a context
// its caller can no longer cancel.
const afterCommitTimeout = 2 * time.Minute

// Finalize ends a thread held at version, as the spec's step 14: commit
// status, result and the transcript's final mark (fenced by version), link
// the continuation of a handed-off thread, charge the last turn when it is
// not yet (Outcome.Charge), release its chain's ledger entry unless it
// handed off (a guaranteed entry gives back what it did not spend; spend
// is already in every ancestor), and release the caller's lease — all in
// one Redis script (finalize.lua: one round trip, atomic, and a stale
// version changes nothing) — then write the signed thread.json, wake the
// threads waiting on its chain, and cancel its unfinished children as the
// project's child policy says (cascades). Every step is idempotent, so
// a worker that recovers a half-finalized thread runs Finalize again.
//
// The commit comes after the thread's final segment, so the mark it
// records is exact: from here on, deleting any segment of the thread fails
// verification (VerifyThread).
func (rt *Runtime) Finalize(ctx context.Context, rec *registry.Record, version int64, out Outcome) error {
	return rt.finalize(ctx, rec, version, out)
}

// finalize is Finalize, which Cancel and fail run too for a thread no
// activation holds.
func (o *Orchestrator) finalize(ctx context.Context, rec *registry.Record, version int64, out Outcome) error {
	log := o.threadLog(rec.ThreadID)
	if out.Transcript == nil {
		out.Transcript = o.currentMark(ctx, rec)
	}
	out.Error = out.Error.Tidy() // "code: message" reads once, in the registry and thread.json
	if err := o.boundOutcome(ctx, rec.ThreadID, &out); err != nil {
		return err
	}
	ch := registry.Changes{Status: out.Status, Cost: &out.Cost, Error: out.Error}
	if out.Transcript != nil {
		ch.Transcript = RecordMark(*out.Transcript)
	}
	if out.ContinuationID != "" {
		ch.Status = "" // the link moves it to continued, after the fenced commit
	}
	if out.Result != "" {
		ch.Result = &out.Result
	}
	if out.Outputs != nil {
		ch.Outputs = out.Outputs
	}
	v, waiters, err := o.finish(ctx, rec, version, ch, out)
	if err != nil {
		return err
	}

	// The end is committed, and the lease was released with it: the
	// worker's heartbeat may now find the lease gone and cancel ctx. What
	// follows (thread.json, waking waiters, the child policy) must not be
	// cut short by that, nor by a cancel request that arrives now.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), afterCommitTimeout)
	defer cancel()
	final := finalRecord(rec, v, out, o.Now())
	if err := o.writeFinalThreadJSON(ctx, final, out.ThreadJSON); err != nil {
		log.Warn("thread.json not written", "error", err)
	}
	if len(waiters) > 0 {
		if err := o.wakeWaiters(ctx, final.ChainRootID, waiters); err != nil {
			return err
		}
	}
	if o.cascades(ctx, rec, out.Status) {
		o.cascadeCancel(ctx, rec.ThreadID)
	}
	o.traceEnd(final)
	log.Info("thread finished", "status", out.Status, "turns", out.Cost.Turns, "spend", out.Cost.Spend)
	return nil
}

// finalizeScript is finalize.lua after the Lua functions it calls.
var finalizeScript = redisfn.New("finalize", registry.Lua+ledger.Lua, finalizeLua)

//go:embed finalize.lua
var finalizeLua string

// finish runs finalizeScript: it commits ch at version, and the rest of
// Finalize's one step as out asks. It returns the thread's new version
// and the waiters of its chain (a handoff: none), or the error of the
// first step that refused: the registry's, the charge's (given to
// Charge.Done too), or the release's.
func (o *Orchestrator) finish(ctx context.Context, rec *registry.Record, version int64, ch registry.Changes, out Outcome) (int64, []string, error) {
	commitKeys, commitArgs, err := o.reg.CommitArgs(rec.ThreadID, version, ch)
	if err != nil {
		return 0, nil, err
	}
	entry, path := rec.LedgerID(), rec.BudgetPath()
	chargeKey, chargeNano, err := chargeArgs(entry, out.Charge)
	if err != nil {
		return 0, nil, err
	}
	status := string(ch.Status)
	if out.ContinuationID == "" && (status == "" || status == ledger.StatusActive) {
		return 0, nil, fmt.Errorf("release %s: final status %q is not a final status", entry, status)
	}
	lkeys, lids, err := o.ledger.PathArgs(entry, path)
	if err != nil {
		return 0, nil, fmt.Errorf("release %s: %w", entry, err)
	}
	// registry.commit's keys but its outbox, which goes last (finalize.lua).
	keys := slices.Concat(commitKeys[:3], []string{o.keys.Lease(rec.ThreadID), o.keys.Waiters(rec.ChainRootID)}, lkeys)
	if out.ContinuationID != "" {
		keys = append(keys, o.keys.Thread(out.ContinuationID))
	}
	keys = append(keys, commitKeys[3])
	args := slices.Concat([]any{rec.ThreadID, o.Now().UTC().Format(time.RFC3339Nano), status, out.ContinuationID, out.Lease,
		chargeKey, len(lkeys), chargeNano}, lids, commitArgs)
	res, err := finalizeScript.Run(ctx, o.fast, keys, args...).Slice()
	if err != nil {
		return 0, nil, finishError(rec, version, out, err)
	}
	if len(res) != 4 {
		return 0, nil, reply.Unexpected("finalize", res)
	}
	if err := chargeDone(entry, out.Charge, res[2]); err != nil {
		return 0, nil, err
	}
	return reply.Int(res[0]), reply.Strings(res[3]), nil
}

// chargeArgs are finalizeScript's arguments for the last charge c of
// ledger entry entry: its idempotency key and its amount in nano units;
// "" and 0 without one.
func chargeArgs(entry string, c *Charge) (key string, nano int64, err error) {
	if c == nil {
		return "", 0, nil
	}
	if nano, err = ledger.ToNano(c.Amount); err != nil {
		return "", 0, fmt.Errorf("charge %s: %w", entry, err)
	}
	if c.Key == "" {
		return "", 0, fmt.Errorf("charge %s: empty idempotency key", entry)
	}
	return c.Key, nano, nil
}

// chargeDone reads what the last charge c charged from v, finalizeScript's
// reply, and gives it to c.Done. The error is the charge's, but for a
// limit: the charge was clamped, recorded, and the thread has ended anyway.
func chargeDone(entry string, c *Charge, v any) error {
	if c == nil {
		return nil
	}
	charged, err := ledger.ReadCharged(entry, v)
	if c.Done != nil {
		c.Done(charged, err)
	}
	var le *thread.LimitError
	if err != nil && !errors.As(err, &le) {
		return err
	}
	return nil
}

// finishError is the error of finalizeScript's failure err: the refusal
// of the registry's, the charge's (given to Charge.Done too) or the
// release's, else err wrapped.
func finishError(rec *registry.Record, version int64, out Outcome, err error) error {
	if rerr := registry.RefusalError(rec.ThreadID, version, err); rerr != nil {
		return rerr
	}
	entry, path := rec.LedgerID(), rec.BudgetPath()
	if c := out.Charge; c != nil {
		// The charge runs before the release, on the same path: a
		// refusal of the ledger's is the charge's.
		if rerr := ledger.RefusalError("charge", entry, path, c.Amount, err); rerr != nil {
			if c.Done != nil {
				c.Done(ledger.Charged{}, rerr)
			}
			return rerr
		}
	}
	if rerr := ledger.RefusalError("release", entry, path, 0, err); rerr != nil {
		return fmt.Errorf("release budget of %s: %w", rec.ThreadID, rerr)
	}
	return fmt.Errorf("finalize %s: %w", rec.ThreadID, err)
}

// finalRecord is rec as Finalize left it, without reading it back.
func finalRecord(rec *registry.Record, version int64, out Outcome, now time.Time) *registry.Record {
	f := *rec
	f.Status, f.Cost, f.Error, f.Version, f.UpdatedAt = out.Status, out.Cost, out.Error, version, now.UTC()
	if out.Result != "" {
		f.Result = out.Result
	}
	if out.Outputs != nil {
		f.Outputs = out.Outputs
	}
	if out.ContinuationID != "" {
		f.ContinuationThreadID = out.ContinuationID
	}
	if m := out.Transcript; m != nil && m.Segments >= f.Transcript.Segments {
		f.Transcript = *RecordMark(*m)
	}
	return &f
}

// currentMark reads the transcript of a thread that Finalize ends without
// a worker (created or waiting: its last segment was written before the
// registry heard of it), held to the registry's mark, and returns its
// mark; nil, logged, when it does not read.
func (o *Orchestrator) currentMark(ctx context.Context, rec *registry.Record) *transcript.Mark {
	tr, err := o.readHeld(ctx, rec, transcript.Strict)
	if err != nil {
		o.threadLog(rec.ThreadID).Warn("transcript mark not updated: the transcript does not read", "error", err)
		return nil
	}
	m := tr.Mark()
	return &m
}

// wakeWaiters re-enqueues the threads among waiters (the chain's, as
// finalize.lua read them) for which the chain rooted at root was the last
// one they waited on.
func (o *Orchestrator) wakeWaiters(ctx context.Context, root string, waiters []string) error {
	wakes, err := o.acts.NotifyWaiters(ctx, root, waiters)
	if err != nil {
		return err
	}
	for _, w := range wakes {
		if err := o.enqueueWake(ctx, w); err != nil {
			return err
		}
	}
	return nil
}

// EnqueueWake enqueues the wake-up activation of a waiting thread.
func (rt *Runtime) EnqueueWake(ctx context.Context, w registry.Wake) error {
	return rt.enqueueWake(ctx, w)
}

// enqueueWake is EnqueueWake, which every operation that wakes a thread
// runs.
func (o *Orchestrator) enqueueWake(ctx context.Context, w registry.Wake) error {
	rec, err := o.reg.Get(ctx, w.ThreadID)
	if err != nil {
		return err
	}
	// A wake-up is one task per suspension (its id names the sequence
	// number); Reenqueue enqueues it again should Redis have kept that task
	// as finished but lost the claim it made.
	_, err = o.Reenqueue(ctx, queue.Activation{ThreadID: w.ThreadID, Reason: "wake"}, w.Seq, rec.Queue)
	return err
}

// WriteThreadJSON writes threads/<id>/thread.json, signed.
func (o *Orchestrator) WriteThreadJSON(ctx context.Context, rec *registry.Record) error {
	data, err := transcript.SignJSON(rec, o.signer)
	if err != nil {
		return err
	}
	// A view: the registry holds the record; thread.json is its signed copy.
	return blobstore.PutView(ctx, o.store, blobkey.ThreadJSON(rec.ThreadID), data)
}

// fail ends a thread that no activation holds (created or waiting) with an
// error, at the version the caller read.
func (o *Orchestrator) fail(ctx context.Context, rec *registry.Record, code, msg string) error {
	return o.finalize(ctx, rec, rec.Version, Outcome{Status: thread.StatusError, Error: &registry.ErrorInfo{Code: code, Message: msg}, Cost: rec.Cost})
}

// cascades reports whether a thread that ended with status cancels its
// unfinished children, as the child policy of its project
// (resilience.yaml child_policy; default: cascade on cancel and on error,
// allow on completion) says. A cancel requested without cascade
// (`spool thread cancel --cascade=false`) leaves the children running
// whatever the policy; a continued thread's children stay (its
// continuation may still wait on them).
func (o *Orchestrator) cascades(ctx context.Context, rec *registry.Record, status thread.Status) bool {
	policy := config.DefaultChildPolicy()
	if p, err := o.Project(ctx, rec.Bundle); err == nil {
		policy = p.Resilience.Children
	}
	switch status {
	case thread.StatusCancelled:
		if policy.OnParentCancel != config.ChildCascadeCancel {
			return false
		}
		// The record the caller holds may predate the request: read the
		// flag as it is now.
		if cur, err := o.reg.Get(ctx, rec.ThreadID); err == nil && cur.CancelRequested && !cur.CancelCascade {
			return false
		}
		return true
	case thread.StatusError:
		return policy.OnParentError == config.ChildCascadeCancel
	case thread.StatusCompleted:
		return policy.OnParentComplete == config.ChildCascadeCancel
	}
	return false
}

// Cancel asks a thread to stop; a continued thread's chain is followed to
// the thread it has reached, and that one is cancelled. A running thread
// sees the request between turns or during its model call (its worker
// cancels the call); a thread that no activation holds (created, waiting,
// or running without a lease: handed back until a retry time) is
// finalized here. With cascade, its children are cancelled too (on
// whatever worker runs them) where the child policy cascades on cancel (the
// default); without, they keep running.
func (o *Orchestrator) Cancel(ctx context.Context, id string, cascade bool) (*registry.Record, error) {
	// A continued thread lives on in its continuation: cancel the thread
	// its chain has reached (the spec's resolve_thread_chain).
	id, err := o.reg.ResolveChain(ctx, id)
	if err != nil {
		return nil, err
	}
	for attempt := 0; attempt < 5; attempt++ {
		rec, err := o.reg.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		if rec.Status == thread.StatusContinued {
			// Handed off since the chain was resolved: the chain lives on
			// in the continuation.
			next, err := o.reg.ResolveChain(ctx, id)
			if err != nil {
				return nil, err
			}
			if next != id {
				id = next
				continue
			}
		}
		if rec.Status.Terminal() {
			return rec, nil
		}
		held, err := o.requestCancel(ctx, rec, cascade)
		if err != nil {
			return nil, err
		}
		if held {
			return rec, nil // its activation sees the flag
		}
		// No activation holds it (created, waiting, or handed back to
		// wait out a retry time, or for a shutdown, or its worker died):
		// end it here. The fence makes a claim that comes first win; then
		// this sees it held.
		cost := rec.Cost
		if rec.IsGraph() {
			// A graph run's spend is its subtree's, as its worker's end
			// writes it: its children spent what it did.
			if spend, err := o.SubtreeSpend(ctx, rec); err == nil {
				cost.Spend = spend
			}
		}
		err = o.finalize(ctx, rec, rec.Version, Outcome{Status: thread.StatusCancelled, Cost: cost,
			Error: &registry.ErrorInfo{Code: "cancelled", Message: "cancelled by request"}})
		if errors.Is(err, registry.ErrConflict) {
			continue // a worker claimed it meanwhile: it will see the flag
		}
		if err != nil {
			return nil, err
		}
		if rec.IsGraph() {
			o.logGraphCancelled(ctx, rec)
		}
		o.cancelParked(ctx, rec) // it waited for admission: its request goes
		return o.reg.Get(ctx, id)
	}
	return o.reg.Get(ctx, id)
}

// requestCancel sets the cancel flag of rec, a thread not finished,
// cancels its children when cascade and its child policy say so, and
// reports whether an activation holds the thread, a running one's lease:
// then it sees the flag, and Cancel leaves the end to it.
func (o *Orchestrator) requestCancel(ctx context.Context, rec *registry.Record, cascade bool) (held bool, err error) {
	if err := o.reg.RequestCancel(ctx, rec.ThreadID, cascade); err != nil {
		return false, err
	}
	if cascade && o.cascades(ctx, rec, thread.StatusCancelled) {
		o.cascadeCancel(ctx, rec.ThreadID)
	}
	if rec.Status != thread.StatusRunning {
		return false, nil
	}
	return o.acts.LeaseHeld(ctx, rec.ThreadID)
}

// cascadeCancel cancels every unfinished child of id (best effort: a
// child's own finalize cascades further down).
func (o *Orchestrator) cascadeCancel(ctx context.Context, id string) {
	kids, err := o.reg.ListChildren(ctx, id)
	if err != nil {
		o.threadLog(id).Warn("cascade cancel: list children", "error", err)
		return
	}
	for _, k := range kids {
		if k.Status.Terminal() {
			continue
		}
		if _, err := o.Cancel(ctx, k.ThreadID, true); err != nil {
			o.threadLog(k.ThreadID).Warn("cascade cancel", "error", err, "parent_id", id)
		}
	}
}

// MaxRecordResultBytes bounds a thread's result, and its outputs as JSON,
// in the registry (Redis holds small state; the record is read by every
// show, list and wait): a larger one is stored whole in the blob store
// (threads/<id>/result.txt, outputs.json) and the record keeps a cut
// result with a note naming it, or outputs {"spool_outputs_cut": bytes,
// "artifact": key}.
const MaxRecordResultBytes = 256 << 10

// boundOutcome keeps out's result and outputs within MaxRecordResultBytes.
func (o *Orchestrator) boundOutcome(ctx context.Context, id string, out *Outcome) error {
	if len(out.Result) > MaxRecordResultBytes {
		key := blobkey.Result(id)
		b, err := tools.Bound(ctx, o.store, key, tools.Result{Output: out.Result}, MaxRecordResultBytes)
		if err != nil {
			return err
		}
		out.Result = b.Output
	}
	if out.Outputs != nil {
		raw, err := json.Marshal(out.Outputs)
		if err == nil && len(raw) > MaxRecordResultBytes {
			key := blobkey.Outputs(id)
			if err := o.store.Put(ctx, key, raw); err != nil {
				return fmt.Errorf("store the outputs of %s: %w", id, err)
			}
			out.Outputs = map[string]any{"spool_outputs_cut": len(raw), "artifact": key}
		}
	}
	return nil
}
