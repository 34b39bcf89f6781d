package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
)

// ArtifactsDeletedField is the registry hash field retention sets on a
// thread whose persisted artifacts it deleted (RFC 3339 time). The record
// itself is kept: see the package doc.
const ArtifactsDeletedField = orchestrator.ArtifactsDeletedField

// HousekeepingResult is what one housekeeping pass did.
type HousekeepingResult struct {
	// Skipped: another scheduler process was running a pass.
	Skipped bool
	// Orphans is the number of running threads found with a lapsed lease
	// and Wakes of waiting threads whose wake-up was lost; both were
	// re-enqueued by orchestrator.Housekeeper.Recover.
	Orphans, Wakes int
	// Retained is the number of finished threads whose artifacts were
	// deleted, Objects the number of blob objects deleted.
	Retained, Objects int
	// Forgotten is the number of finished threads whose Redis records
	// were deleted (Config.RecordRetention).
	Forgotten int
	// Reconcile is what reconciling the registry and the ledger with the
	// transcripts did; its Trigger is "" when none was due.
	Reconcile ReconcileResult
	// Functions are the Redis Function libraries deleted as unused
	// (Config.FunctionsUnused).
	Functions []string
	// Indexed is how many runs registered before the directive index
	// existed were put in it (backfillDirectiveIndex).
	Indexed int
}

// pruneEvery is how often a scheduler process prunes Function libraries.
const pruneEvery = time.Hour

// runHousekeeping runs a pass at once and then every interval.
func (s *Scheduler) runHousekeeping(ctx context.Context) {
	t := time.NewTicker(s.cfg.HousekeepingInterval)
	defer t.Stop()
	for {
		if _, err := s.Housekeep(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("housekeeping", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Housekeep runs one housekeeping pass, unless another scheduler process
// (or another call of this one's) is running one (Skipped): when Redis may have lost writes (or the periodic
// pass is due) the registry and the ledger are reconciled with the
// transcripts (Reconcile), orchestrator.Housekeeper.Recover re-enqueues orphaned threads
// (running, lease lapsed) and lost wake-ups, then, with Retention set,
// Retain deletes the artifacts of threads finished longer ago than that.
// Every step is idempotent, so a pass cut short is finished by the next;
// a reconciliation that fails (the blob store is down) does not keep the
// rest of the pass from running, and is run again by the next.
func (s *Scheduler) Housekeep(ctx context.Context) (res HousekeepingResult, err error) {
	began := time.Now()
	defer func() { s.cfg.Metrics.housekeeping(res, err, time.Since(began).Seconds()) }()
	// One pass at a time in this process, so that the lock under this
	// process's token is one whose release was lost (acquireOwn).
	if !s.pass.TryLock() {
		res.Skipped = true
		return res, nil
	}
	defer s.pass.Unlock()
	key := HousekeepingLockKey(s.keys)
	ttl := max(2*s.cfg.HousekeepingInterval, time.Minute)
	ok, err := acquireOwn(ctx, s.scripts, key, s.token, ttl)
	if err != nil {
		return res, fmt.Errorf("housekeeping lock: %w", err)
	}
	if !ok {
		res.Skipped = true
		return res, nil
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = release(rctx, s.scripts, key, s.token)
	}()

	var reconcileErr error
	if res.Reconcile, reconcileErr = s.reconcile(ctx); reconcileErr != nil {
		reconcileErr = fmt.Errorf("reconcile: %w", reconcileErr)
	}

	if res.Orphans, res.Wakes, err = s.o.Recover(ctx); err != nil {
		return res, fmt.Errorf("recover: %w", err)
	}

	if s.cfg.Retention > 0 {
		b, err := s.busy(ctx)
		if err != nil {
			return res, fmt.Errorf("retention: %w", err)
		}
		if res.Retained, res.Objects, err = s.Retain(ctx, s.o.Now().Add(-s.cfg.Retention), b); err != nil {
			return res, err
		}
		if s.cfg.RecordRetention > 0 {
			if res.Forgotten, err = s.Forget(ctx, s.o.Now().Add(s.cfg.Retention-s.cfg.RecordRetention), b); err != nil {
				return res, err
			}
		}
	}
	res.Functions = s.pruneFunctions(ctx)
	if res.Indexed, err = s.backfillDirectiveIndex(ctx); err != nil {
		s.log.Warn("housekeeping: backfill the directive index", "error", err)
	}
	return res, reconcileErr
}

// backfillDirectiveIndex puts up to 50,000 runs registered before the
// directive index existed in it each pass, until all are
// (registry.Registry.BackfillDirectiveIndex): a namespace of a million
// runs is indexed in twenty passes, each a few seconds of Redis time.
func (s *Scheduler) backfillDirectiveIndex(ctx context.Context) (int, error) {
	total := 0
	for range 50 {
		n, done, err := s.o.BackfillDirectiveIndex(ctx)
		total += n
		if err != nil || done {
			return total, err
		}
	}
	return total, nil
}

// pruneFunctions deletes the Function libraries no process has used for
// FunctionsUnused, at most once every pruneEvery. A failure (an ACL
// without FUNCTION) is logged and tried again pruneEvery later: it keeps
// no other step from running.
func (s *Scheduler) pruneFunctions(ctx context.Context) []string {
	now := s.o.Now()
	if s.cfg.FunctionsUnused < 0 || now.Sub(s.prunedAt) < pruneEvery {
		return nil
	}
	s.prunedAt = now
	deleted, err := redisfn.Prune(ctx, s.cfg.Redis, redisfn.Prefix, s.cfg.FunctionsUnused, now)
	if err != nil {
		s.log.Warn("housekeeping: prune Redis Function libraries", "error", err)
	}
	if len(deleted) > 0 {
		s.log.Info("housekeeping: deleted unused Redis Function libraries", "libraries", deleted,
			"unused_for", s.cfg.FunctionsUnused)
	}
	return deleted
}

// Retain deletes the persisted artifacts of threads that finished before
// cutoff: transcript segments (with their checkpoints), the knowledge
// render, thread.json, capabilities.md, tool artifacts (everything under
// threads/<id>/) and, with the last thread of a root thread's continuation
// chain, the tree's workspace (of a fork's chain, the fork's). A thread is
// left alone while any thread of its tree (same root) or of its
// continuation chain is still active (b), since those may still read it. The
// registry record is kept, marked with ArtifactsDeletedField. It returns
// the number of threads cleaned and of objects deleted.
//
// Threads are visited oldest first from a watermark this process keeps:
// threads created before it are all settled (cleaned, or records gone), so
// a pass examines only the threads it has not settled yet, at most
// RetentionScan records.
func (s *Scheduler) Retain(ctx context.Context, cutoff time.Time, b Busy) (threads, objects int, err error) {
	err = s.sweep(ctx, &s.retainAt, cutoff, func(_ string, r *spooltype.Record) (bool, error) {
		switch {
		case r == nil, r.Extra[ArtifactsDeletedField] != "":
			return true, nil
		case !r.Status.Terminal() || r.UpdatedAt.After(cutoff) || b.Holds(r):
			return false, nil
		}
		n, err := s.clean(ctx, r)
		objects += n
		if err != nil {
			return false, err
		}
		threads++
		return true, nil
	})
	if err != nil {
		return threads, objects, fmt.Errorf("retention: %w", err)
	}
	return threads, objects, nil
}

// Busy are the trees and the continuation chains with a thread that is
// not finished: their threads may still be read, so retention leaves
// them. One housekeeping pass reads them once, for Retain and Forget.
type Busy struct{ trees, chains map[string]bool }

// Holds reports whether r is in a busy tree or chain.
func (b Busy) Holds(r *spooltype.Record) bool { return b.trees[r.TreeID()] || b.chains[r.ChainRootID] }

// busy reads the active threads' trees and chains.
func (s *Scheduler) busy(ctx context.Context) (Busy, error) {
	active, err := s.o.Active(ctx)
	if err != nil {
		return Busy{}, err
	}
	b := Busy{trees: map[string]bool{}, chains: map[string]bool{}}
	for _, r := range active {
		b.trees[r.TreeID()] = true
		b.chains[r.ChainRootID] = true
	}
	return b, nil
}

// sweep visits the threads created before cutoff, oldest first, from the
// watermark *at (under s.mu): visit says whether a thread is settled for
// good (r is nil for an id without a record), and *at moves past the
// threads settled before the first that is not, so that the next sweep
// starts there. A sweep examines at most RetentionScan threads.
func (s *Scheduler) sweep(ctx context.Context, at *float64, cutoff time.Time,
	visit func(id string, r *spooltype.Record) (bool, error)) error {
	s.mu.Lock()
	mark := *at
	s.mu.Unlock()
	lo := "-inf"
	if mark > 0 {
		lo = strconv.FormatFloat(mark, 'f', -1, 64)
	}
	hi := strconv.FormatInt(cutoff.UnixMilli(), 10)
	const batch = 200
	settled := true
	defer func() {
		s.mu.Lock()
		if mark > *at {
			*at = mark
		}
		s.mu.Unlock()
	}()
	for offset := 0; offset < s.cfg.RetentionScan; {
		n := min(batch, s.cfg.RetentionScan-offset)
		zs, err := s.o.ThreadsByTime(ctx, orchestrator.Window{Min: lo, Max: hi, Offset: int64(offset), Count: int64(n)})
		if err != nil {
			return err
		}
		if len(zs) == 0 {
			return nil
		}
		ids := orchestrator.IDs(zs)
		recs, err := s.o.Records(ctx, ids)
		if err != nil {
			return err
		}
		byID := make(map[string]*spooltype.Record, len(recs))
		for _, r := range recs {
			byID[r.ThreadID] = r
		}
		for i, z := range zs {
			done, err := visit(ids[i], byID[ids[i]])
			if err != nil {
				return err
			}
			if settled && done {
				mark = z.Score
			} else {
				settled = false
			}
		}
		offset += len(zs)
		if len(zs) < n {
			return nil
		}
	}
	return nil
}

// clean deletes one finished thread's artifacts and marks its record
// (orchestrator.Housekeeper.DeleteArtifacts).
func (s *Scheduler) clean(ctx context.Context, r *spooltype.Record) (int, error) {
	n, err := s.o.DeleteArtifacts(ctx, r)
	if err != nil {
		return n, err
	}
	s.log.Info("retention deleted thread artifacts", "thread_id", r.ThreadID, "objects", n)
	return n, nil
}
