package orchestrator

import "context"

// Housekeeper is the orchestrator as housekeeping has it (package
// scheduler, and every worker's recoverer through its Runtime): the
// operations people call, and the writes that hold records, budgets and
// transcripts together after a crash or a lost write (Recover, Restore,
// Recharge, Reconcile, Requeue) and retention's deletes
// (DeleteArtifacts, Forget). Which threads, and when, is the caller's to
// decide; how each is done is here, beside the rules it keeps. No
// package above the orchestrator but those two takes one (TestFloor).
type Housekeeper struct {
	*Orchestrator
}

// Housekeeper returns o as housekeeping has it: the scheduler's and the
// worker's.
func (o *Orchestrator) Housekeeper() *Housekeeper { return &Housekeeper{o} }

// Restore returns the record of thread id, a child of parent ("" for a
// root), restoring it from the blob store when the registry has none
// (restore.go): ErrNotDurable when it left nothing durable there. A
// thread.json or transcript that names another parent, or a transcript
// that does not verify, is an error: such a thread is not restored. A
// planned start (StartRequest.Planned) restores the child it adopts the
// same way.
func (h *Housekeeper) Restore(ctx context.Context, id, parent string) (*Restored, error) {
	return h.restore(ctx, id, parent)
}
