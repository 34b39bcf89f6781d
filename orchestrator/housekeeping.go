package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/blobkey"
	"github.com/spool-run/spool/queue"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/transcript"
)

// The writes of housekeeping (package scheduler): retention deletes a
// finished thread's artifacts and then its records, reconciliation holds
// a record to its transcript and requeues a start that was lost. Which
// threads, and when, is the scheduler's to decide; how each is done is
// here, beside the rules it keeps.

// RequeuedField is the registry hash field (Record.Extra) in which
// Requeue notes the sequence number of the requeue task it enqueued for
// a created thread.
const RequeuedField = "requeued_seq"

// Requeue gives created thread rec, whose start task was lost, a new
// activation task (reason requeue, sequence number seq) and notes seq on
// its record (RequeuedField), so that a later look finds that task queued
// and enqueues no other. A record that changed meanwhile is not noted (the
// claim drops a task it does not expect).
func (h *Housekeeper) Requeue(ctx context.Context, rec *registry.Record, seq int64) error {
	enqueued, err := h.admitAndEnqueue(ctx, rec, queue.Activation{ThreadID: rec.ThreadID, Reason: "requeue"}, seq, false)
	if err != nil || !enqueued {
		return err // parked: its record says so (waiting), and its grant enqueues it
	}
	_, err = h.reg.Commit(ctx, rec.ThreadID, rec.Version, registry.Changes{Fields: map[string]string{
		RequeuedField: strconv.FormatInt(seq, 10)}})
	if err != nil && !errors.Is(err, registry.ErrConflict) {
		return err
	}
	return nil
}

// RequeueTaskID is the id of the asynq task Requeue enqueued with
// sequence number seq (RequeuedField) for thread id: what reconciliation
// looks for in its queue before it requeues the thread again.
func RequeueTaskID(id string, seq int64) string {
	return queue.TaskID(queue.Activation{ThreadID: id, Reason: "requeue"}, seq)
}

// Reconcile raises thread id's transcript mark and version as rc says
// (registry.Registry.Reconcile): what reconciliation does once it has read
// the thread's transcript.
func (h *Housekeeper) Reconcile(ctx context.Context, id string, rc registry.Reconciliation) (registry.Reconciled, error) {
	return h.reg.Reconcile(ctx, id, rc)
}

// SegmentCount is the number of thread id's transcript segments in the
// store.
func (h *Housekeeper) SegmentCount(ctx context.Context, id string) (int, error) {
	infos, err := h.store.List(ctx, blobkey.Segments(id))
	return len(infos), err
}

// DeleteArtifacts deletes the persisted artifacts of finished thread rec:
// transcript segments (with their checkpoints), the knowledge render,
// thread.json, capabilities.md, tool artifacts (everything under
// threads/<id>/) and, when rec is the last thread of a root thread's
// continuation chain, the tree's workspace (of a fork's chain, the
// fork's); then it marks the record (registry.ArtifactsDeletedField),
// which is kept. It returns the number of objects deleted, also when it
// fails part way.
func (h *Housekeeper) DeleteArtifacts(ctx context.Context, rec *registry.Record) (int, error) {
	id := rec.ThreadID
	deleted, err := transcript.Clean(ctx, h.store, id, transcript.CleanOptions{Transcript: true, Checkpoints: true,
		Metadata: true, Directive: rec.Directive})
	n := len(deleted)
	if err != nil {
		return n, fmt.Errorf("retention of %s: %w", id, err)
	}
	prefixes := []string{blobkey.Thread(id)}
	if rec.ContinuationThreadID == "" && (rec.ParentID == "" || rec.Workspace != "" && rec.Workspace == rec.ChainRootID) {
		// The last thread of a root chain, or of a fork's chain (a fork
		// has a workspace of its own): threads are cleaned oldest first,
		// so its tree and chain are done: workspaces/<id>/files/ and
		// workspaces/<id>/locks/.
		prefixes = append(prefixes, blobkey.Workspace(rec.WorkspaceID()))
	}
	for _, p := range prefixes {
		infos, err := h.store.List(ctx, p)
		if err != nil {
			return n, fmt.Errorf("retention of %s: %w", id, err)
		}
		for _, in := range infos {
			if err := h.store.Delete(ctx, in.Key); err != nil {
				return n, fmt.Errorf("retention of %s: %w", id, err)
			}
			n++
		}
	}
	_, err = h.reg.Commit(ctx, id, 0, registry.Changes{Fields: map[string]string{
		registry.ArtifactsDeletedField: h.Now().UTC().Format(time.RFC3339)}})
	if err != nil && !errors.Is(err, registry.ErrNotFound) {
		return n, fmt.Errorf("retention of %s: %w", id, err)
	}
	return n, nil
}

// Forget deletes the Redis records of finished thread rec
// (registry.Registry.Forget: its record, ledger entry, sets and queues),
// unless it changed since rec was read (registry.ErrConflict).
func (h *Housekeeper) Forget(ctx context.Context, rec *registry.Record) error {
	return h.reg.Forget(ctx, rec)
}

// BackfillDirectiveIndex puts up to a thousand runs registered before the
// directive index existed in it, and says how many and whether every run
// is in (registry.Registry.BackfillDirectiveIndex).
func (h *Housekeeper) BackfillDirectiveIndex(ctx context.Context) (int, bool, error) {
	return h.reg.BackfillDirectiveIndex(ctx, 1000)
}
