package registry

import (
	"context"
	"fmt"
	"strconv"
)

// Forget deletes what Redis holds of finished thread rec, as read at
// rec.Version: its record, ledger entry, children and forks sets, spawn
// counter, cancel flag, waits, decisions, inbox, lease, chain waiters and
// a graph run's messages, and its entries in its shard's threads index,
// its tenant's and its tags' indexes and the active and
// awaiting-approval sets. Its parent's children set and its source's
// forks set still name it until they go with their own thread (List and
// ListChildren leave out an id without a record). It refuses a thread
// that is not finished (*thread.TransitionError) or whose record changed
// since it was read (*ConflictError), and one already forgotten
// (ErrNotFound), in one call of registry.lua's forget. Housekeeping
// forgets whole trees, long after their artifacts went (scheduler's
// RecordRetention).
func (r *Registry) Forget(ctx context.Context, rec *Record) error {
	id := rec.ThreadID
	keys := []string{r.ks.Thread(id), r.ks.Threads(id), r.ks.Active(id), r.ks.AwaitingApproval(id),
		r.ks.TenantThreads(rec.TenantOrDefault(), id), r.ks.Ledger(id), r.ks.Children(id), r.ks.Forks(id), r.ks.Spawns(id), r.ks.Cancel(id), r.ks.Waits(id),
		r.ks.Decisions(id), r.ks.Inbox(id), r.ks.Lease(id), r.ks.Waiters(id), r.ks.Messages(id), r.ks.MessageIDs(id)}
	tags := r.tagKeys(rec.Directive, rec.Tags, id)
	keys = append(keys, tags...)
	err := regForgetScript.Run(ctx, r.rdb, keys, id, strconv.FormatInt(rec.Version, 10), len(tags)).Err()
	if rerr := RefusalError(id, rec.Version, err); rerr != nil {
		return rerr
	}
	if err != nil {
		return fmt.Errorf("forget thread %q: %w", id, err)
	}
	return nil
}
