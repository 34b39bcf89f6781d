package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/orchestrator"
	"github.com/spool-run/spool/spooltype"
	"github.com/spool-run/spool/thread"
	"github.com/spool-run/spool/transcript"
)

// Why a reconciliation ran: the "trigger" label of
// spool_reconcile_passes_total and ReconcileResult.Trigger.
const (
	// TriggerNoMarker: the housekeeping marker (keyspace.Space.Housekeeping)
	// is missing: the first pass on this Redis, or Redis lost it with the
	// rest of its data.
	TriggerNoMarker = "no_marker"
	// TriggerRestart: Redis runs under a new INFO run_id: it restarted or
	// failed over, and may have lost its last writes.
	TriggerRestart = "redis_restarted"
	// TriggerCanary: the marker's canary counter is lower than this
	// process last made it: Redis lost writes without a restart (a replica
	// resynced, a dataset reloaded).
	TriggerCanary = "canary_lost"
	// TriggerPeriodic: the slow periodic pass (Config.ReconcileInterval).
	TriggerPeriodic = "periodic"
)

// What a reconciliation repaired: the "kind" label of
// spool_reconciled_total.
const (
	// KindRequeue: a created thread whose start task was gone got a new
	// activation task (reason requeue).
	KindRequeue = "requeue"
	// KindMark: a thread's transcript mark was raised to its durable
	// segments.
	KindMark = "transcript_mark"
	// KindVersion: a thread's version was raised past the last durable
	// checkpoint's.
	KindVersion = "version"
	// KindCharge: a turn charge the ledger lacked was applied.
	KindCharge = "charge"
	// KindRestore: a thread the registry lost, which a transcript names
	// as its child, was restored from the store (orchestrator.Housekeeper.Restore).
	KindRestore = "restore"
	// KindMessage: a graph run's message that Redis lost was put back
	// from the store (orchestrator.Housekeeper.RestoreMessages).
	KindMessage = "message"
)

// ReconcileResult is what one reconciliation did.
type ReconcileResult struct {
	// Trigger says why it ran (a Trigger constant); "" when none ran.
	Trigger string
	// Threads is the number of threads examined.
	Threads int
	// Requeued, Marks, Versions, Charges, Restored and Messages count the
	// repairs, by kind (a restored thread's charges among Charges).
	Requeued, Marks, Versions, Charges, Restored, Messages int
	// Skipped is the number of threads left as they were because their
	// transcript does not verify or their ledger entry cannot take the
	// charge (each logged).
	Skipped int
}

// Repairs is the number of repairs of every kind.
func (r ReconcileResult) Repairs() int {
	return r.Requeued + r.Marks + r.Versions + r.Charges + r.Restored + r.Messages
}

// versionFence is how far past the last durable checkpoint's version
// reconciliation raises a thread's version: past every version an
// activation cut off by the loss may still hold (a few commits past its
// last segment), so that none of its commits can ever match again.
const versionFence = 1000

// reconcileWorkers bounds the threads reconciled at once.
const reconcileWorkers = 8

// Fields of the housekeeping marker hash.
const (
	markerRunID    = "run_id"
	markerCanary   = "canary"
	markerPeriodic = "periodic_at"
)

// reconcile runs a reconciliation when one is due (see the package doc)
// and then records what it saw of Redis in the marker. A failed
// reconciliation leaves the marker as it was, so the next pass runs it
// again.
func (s *Scheduler) reconcile(ctx context.Context) (ReconcileResult, error) {
	key := s.keys.Housekeeping()
	runID, known := redisRunID(ctx, s.cfg.Redis, key)
	m, err := s.readMarker(ctx, key)
	if err != nil {
		return ReconcileResult{}, err
	}
	s.mu.Lock()
	lastCanary := s.canary
	s.mu.Unlock()
	now := s.o.Now()
	trigger := s.trigger(m, runID, known, lastCanary, now)
	if trigger == TriggerRestart && s.restartedClean(m) {
		s.log.Info("redis restarted after a clean stop, with every write it had: nothing to reconcile",
			"run_id", runID, "marker_run_id", m.runID, "canary", m.canary)
		trigger = ""
	}
	var res ReconcileResult
	if trigger != "" {
		s.logTrigger(trigger, runID, m, lastCanary)
		if res, err = s.Reconcile(ctx, trigger); err != nil {
			return res, err
		}
		s.cfg.Metrics.reconciled(res)
		s.logReconciled(res)
	}
	pipe := s.cfg.Redis.TxPipeline()
	if known || !m.present {
		pipe.HSet(ctx, key, markerRunID, runID)
	}
	if trigger != "" {
		pipe.HSet(ctx, key, markerPeriodic, now.UTC().Format(time.RFC3339Nano))
	}
	incr := pipe.HIncrBy(ctx, key, markerCanary, 1)
	if _, err := pipe.Exec(ctx); err != nil {
		return res, fmt.Errorf("write the housekeeping marker: %w", err)
	}
	s.mu.Lock()
	s.canary = incr.Val()
	s.mu.Unlock()
	return res, nil
}

// CleanStop is the housekeeping marker of a Redis as a process that ran
// it saw it last, before it stopped the Redis cleanly (Scheduler.Seal):
// the Redis's INFO run_id, and the marker's canary, raised by that last
// write. Every write before it is in the Redis's data (its AOF is
// written in order) if the marker is there, with that canary, after the
// restart.
type CleanStop struct {
	RunID  string `json:"run_id"`
	Canary int64  `json:"canary"`
}

// Seal raises the housekeeping marker's canary once more and returns it
// with the Redis's run_id: what Config.CleanStop is when the process that
// calls it (after every writer of its own stopped) stops the Redis
// cleanly and starts it again. A Redis whose run_id is not known cannot
// be sealed.
func (s *Scheduler) Seal(ctx context.Context) (CleanStop, error) {
	key := s.keys.Housekeeping()
	runID, known := redisRunID(ctx, s.cfg.Redis, key)
	if !known {
		return CleanStop{}, errors.New("seal the housekeeping marker: the redis's run_id is not known")
	}
	canary, err := s.cfg.Redis.HIncrBy(ctx, key, markerCanary, 1).Result()
	if err != nil {
		return CleanStop{}, fmt.Errorf("seal the housekeeping marker: %w", err)
	}
	return CleanStop{RunID: runID, Canary: canary}, nil
}

// restartedClean reports whether marker m, of a Redis that runs under a
// new run_id, is the one Config.CleanStop sealed: the Redis was stopped
// cleanly and came back with every write it had.
func (s *Scheduler) restartedClean(m marker) bool {
	cs := s.cfg.CleanStop
	return cs != nil && m.runID == cs.RunID && m.canary >= cs.Canary
}

// marker is the housekeeping marker as a pass read it.
type marker struct {
	// present: the marker holds a run_id; it has none on a Redis it was
	// never written to, or one that lost it.
	present bool
	// runID is the INFO run_id of the Redis that wrote it last.
	runID string
	// canary is the counter each pass raises.
	canary int64
	// periodicAt is when the last reconciliation ran (RFC 3339).
	periodicAt string
}

// readMarker reads the housekeeping marker at key.
func (s *Scheduler) readMarker(ctx context.Context, key string) (marker, error) {
	vals, err := s.cfg.Redis.HMGet(ctx, key, markerRunID, markerCanary, markerPeriodic).Result()
	if err != nil {
		return marker{}, fmt.Errorf("read the housekeeping marker: %w", err)
	}
	str := func(i int) string { v, _ := vals[i].(string); return v }
	canary, _ := strconv.ParseInt(str(1), 10, 64)
	return marker{present: vals[0] != nil, runID: str(0), canary: canary, periodicAt: str(2)}, nil
}

// trigger says why a reconciliation is due at now, "" when none is: the
// marker is missing, Redis runs under another run_id than the marker's
// (when its own, runID, is known), the canary is lower than this process
// last made it (lastCanary), or the periodic pass is due.
func (s *Scheduler) trigger(m marker, runID string, known bool, lastCanary int64, now time.Time) string {
	switch {
	case !m.present:
		return TriggerNoMarker
	case known && m.runID != runID:
		return TriggerRestart
	case m.canary < lastCanary:
		return TriggerCanary
	case s.cfg.ReconcileInterval > 0:
		at, err := time.Parse(time.RFC3339Nano, m.periodicAt)
		if err != nil || now.Sub(at) >= s.cfg.ReconcileInterval {
			return TriggerPeriodic
		}
	}
	return ""
}

// logTrigger says why a reconciliation runs: nothing for the periodic
// pass, a note for a missing marker (every first start in a new
// namespace, or a Redis that lost it: the result says which), a warning
// for writes Redis may have lost.
func (s *Scheduler) logTrigger(trigger, runID string, m marker, lastCanary int64) {
	switch trigger {
	case TriggerPeriodic:
	case TriggerNoMarker:
		if s.cfg.CleanStop != nil {
			s.log.Warn("redis lost its data since its clean stop (the housekeeping marker is gone): reconciling threads with their transcripts",
				"trigger", trigger, "run_id", runID, "sealed_run_id", s.cfg.CleanStop.RunID)
			return
		}
		s.log.Info("no housekeeping marker in redis: reconciling threads with their transcripts", "trigger", trigger,
			"run_id", runID)
	default:
		s.log.Warn("redis may have lost writes: reconciling threads with their transcripts", "trigger", trigger,
			"run_id", runID, "marker_run_id", m.runID, "canary", m.canary, "canary_seen", lastCanary)
	}
}

func (s *Scheduler) logReconciled(res ReconcileResult) {
	attrs := []any{"trigger", res.Trigger, "threads", res.Threads, "requeued", res.Requeued, "transcript_marks", res.Marks,
		"versions", res.Versions, "charges", res.Charges, "restored", res.Restored, "messages", res.Messages, "skipped", res.Skipped}
	switch {
	case res.Repairs() > 0 || res.Skipped > 0:
		s.log.Warn("reconciled threads with their transcripts", attrs...)
	case res.Trigger != TriggerPeriodic:
		s.log.Info("reconciled threads with their transcripts: nothing was lost", attrs...)
	default:
		s.log.Debug("reconciled threads with their transcripts", attrs...)
	}
}

// redisRunID is the INFO run_id of the Redis server holding key; !known
// when it cannot be read (an error now, or a server that does not say,
// as miniredis): then only the canary tells.
func redisRunID(ctx context.Context, rdb redis.UniversalClient, key string) (runID string, known bool) {
	var c redis.Cmdable = rdb
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return "", false
		}
		c = m
	}
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return "", false
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "run_id:"); ok && v != "" {
			return v, true
		}
	}
	return "", false
}

// Reconcile holds the registry and the ledger to the signed transcripts,
// which are the source of truth (see the package doc), and adds what it
// did. The trigger says which threads it examines: after lost writes
// (any trigger but TriggerPeriodic), every non-terminal thread and
// every thread created within Config.ReconcileWindow, each against its
// whole transcript; periodically, every non-terminal thread, against the
// number of its segments, and in full only those whose transcript is
// ahead of the registry's mark by more than the normal lag.
//
// For each thread: the transcript mark is raised to the durable segments;
// the version is raised past the last durable checkpoint's (when no
// activation holds the thread); every turn charge the transcript records
// and the ledger lacks is applied, under its idempotency key; and a
// created thread whose start task is no longer queued gets a new
// activation task (reason requeue). Then every child its transcript
// names (child_spawned) that the registry lost is restored from the store
// (orchestrator.Housekeeper.Restore), and the children of those, in turn. A thread
// whose transcript does not verify is left alone (integrity is the
// worker's to report).
func (s *Scheduler) Reconcile(ctx context.Context, trigger string) (ReconcileResult, error) {
	res := ReconcileResult{Trigger: trigger}
	err := s.reconcileAll(ctx, &res)
	return res, err
}

func (s *Scheduler) reconcileAll(ctx context.Context, res *ReconcileResult) error {
	recs, err := s.reconcileSet(ctx, res.Trigger != TriggerPeriodic)
	if err != nil {
		return err
	}
	res.Threads = len(recs)
	insp := s.o.Inspector()
	var created []*spooltype.Record
	for _, r := range recs {
		if r.Status == thread.StatusCreated && !startQueued(insp, s.o, r) {
			created = append(created, r)
		}
	}
	checked := time.Now()
	if err := s.reconcileEach(ctx, recs, res); err != nil {
		return err
	}
	return s.requeueLost(ctx, insp, created, checked, res)
}

// reconcileEach reconciles recs (but those whose artifacts retention
// deleted), reconcileWorkers at a time, and adds what each did to res;
// it returns the first error.
func (s *Scheduler) reconcileEach(ctx context.Context, recs []*spooltype.Record, res *ReconcileResult) error {
	var mu sync.Mutex
	var firstErr error
	work := make(chan *spooltype.Record)
	var wg sync.WaitGroup
	for range min(reconcileWorkers, max(len(recs), 1)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range work {
				var one ReconcileResult
				err := s.reconcileThread(ctx, r, res.Trigger, &one)
				mu.Lock()
				res.Marks += one.Marks
				res.Versions += one.Versions
				res.Charges += one.Charges
				res.Restored += one.Restored
				res.Messages += one.Messages
				res.Skipped += one.Skipped
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	for _, r := range recs {
		if r.Extra[ArtifactsDeletedField] == "" {
			work <- r
		}
	}
	close(work)
	wg.Wait()
	return firstErr
}

// requeueLost gives each created thread whose start task was not queued
// when checked, and still is not, a requeue task (orchestrator.Housekeeper.Requeue).
// A start task is claimed within moments of being taken from its queue:
// a created thread whose task was active (or finished, or gone) a second
// ago and still is has lost it.
func (s *Scheduler) requeueLost(ctx context.Context, insp *asynq.Inspector, created []*spooltype.Record, checked time.Time,
	res *ReconcileResult) error {
	if len(created) > 0 {
		if d := time.Second - time.Since(checked); d > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(d):
			}
		}
	}
	now := s.o.Now()
	for _, r := range created {
		cur, err := s.o.Record(ctx, r.ThreadID)
		if err != nil || cur.Status != thread.StatusCreated {
			continue
		}
		if startQueued(insp, s.o, cur) {
			continue
		}
		// Noted on the record, so that a later pass finds this task
		// queued and does not enqueue another (the claim would drop it).
		if err := s.o.Requeue(ctx, cur, now.UnixMilli()); err != nil {
			return err
		}
		res.Requeued++
		s.log.Warn("re-enqueued a created thread whose start task was lost", "thread_id", cur.ThreadID, "trigger", res.Trigger,
			"queue", queueOf(cur))
	}
	return nil
}

func queueOf(r *spooltype.Record) string {
	if r.Queue == "" {
		return orchestrator.DefaultQueue
	}
	return r.Queue
}

// RequeuedField is the registry hash field (Record.Extra) in which
// reconciliation notes the sequence number of the requeue task it
// enqueued for a created thread (orchestrator.Housekeeper.Requeue).
const RequeuedField = orchestrator.RequeuedField

// queueNames names a thread's asynq queue (*orchestrator.Orchestrator
// does).
type queueNames interface {
	QueueOf(q, id string) string
}

// startQueued reports whether created thread rec's start task, or the
// requeue task reconciliation gave it, waits in its asynq queue (pending,
// scheduled or to be retried). Anything else (active, finished, gone) is
// a start that may have been lost; an error reading it counts as queued,
// to be looked at again by a later pass.
func startQueued(insp *asynq.Inspector, qs queueNames, rec *spooltype.Record) bool {
	aq := qs.QueueOf(queueOf(rec), rec.ThreadID)
	ids := []string{rec.ThreadID}
	if seq, err := strconv.ParseInt(rec.Extra[RequeuedField], 10, 64); err == nil {
		ids = append(ids, orchestrator.RequeueTaskID(rec.ThreadID, seq))
	}
	for _, id := range ids {
		info, err := insp.GetTaskInfo(aq, id)
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			continue
		}
		if err != nil {
			return true
		}
		switch info.State {
		case asynq.TaskStatePending, asynq.TaskStateScheduled, asynq.TaskStateRetry, asynq.TaskStateAggregating:
			return true
		}
	}
	return false
}

// reconcileSet is the records a reconciliation examines: the non-terminal
// threads and, after lost writes, the threads created within the window.
func (s *Scheduler) reconcileSet(ctx context.Context, afterLoss bool) ([]*spooltype.Record, error) {
	recs, err := s.o.Active(ctx)
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	if !afterLoss {
		return recs, nil
	}
	seen := make(map[string]bool, len(recs))
	for _, r := range recs {
		seen[r.ThreadID] = true
	}
	since := s.o.Now().Add(-s.cfg.ReconcileWindow).UnixMilli()
	zs, err := s.o.ThreadsByTime(ctx, orchestrator.Window{Min: strconv.FormatInt(since, 10)})
	if err != nil {
		return nil, fmt.Errorf("reconcile: %w", err)
	}
	ids := orchestrator.IDs(zs)
	var more []string
	for _, id := range ids {
		if !seen[id] {
			more = append(more, id)
		}
	}
	for len(more) > 0 {
		n := min(len(more), 500)
		got, err := s.o.Records(ctx, more[:n])
		if err != nil {
			return nil, fmt.Errorf("reconcile: %w", err)
		}
		recs = append(recs, got...)
		more = more[n:]
	}
	return recs, nil
}

// reconcileThread holds one thread's record and ledger entry to its
// transcript (see Reconcile) and counts what it repaired in res.
func (s *Scheduler) reconcileThread(ctx context.Context, rec *spooltype.Record, trigger string, res *ReconcileResult) error {
	id := rec.ThreadID
	tr, err := s.readToReconcile(ctx, rec, trigger, res)
	if err != nil || tr == nil {
		return err
	}
	got, err := s.raiseRecord(ctx, rec, tr, res)
	if err != nil {
		return err
	}
	charges, err := orchestrator.RecordedCharges(tr)
	if err != nil {
		return err
	}
	applied, err := s.recharge(ctx, rec, charges, res)
	if got.MarkRaised() || got.VersionRaised() || len(applied) > 0 {
		s.log.Warn("reconciled thread with its transcript", "thread_id", id, "status", rec.Status, "trigger", trigger,
			"transcript_mark_from", got.MarkFrom, "transcript_mark_to", got.MarkTo,
			"version_from", got.VersionFrom, "version_to", got.VersionTo,
			"charges", len(applied), "charged_usd", orchestrator.ChargedUSD(applied), "ledger_id", rec.LedgerID())
	}
	if err != nil {
		return err
	}
	if trigger != TriggerPeriodic {
		// After lost writes: a graph run's messages Redis lost come back
		// from the store (the periodic pass does not list the store).
		n, err := s.o.RestoreMessages(ctx, rec, tr)
		res.Messages += n
		if err != nil {
			return fmt.Errorf("reconcile %s: %w", id, err)
		}
	}
	return s.restoreChildren(ctx, id, tr, res)
}

// segmentLag is the normal lag of rec's transcript mark behind its
// segments: a checkpoint commits before its segment is written, so the
// last segment of a thread that has not finished may be past the mark
// (the worker package doc). A created thread has no segment and a
// finished one's mark is exact.
func segmentLag(rec *spooltype.Record) int64 {
	if rec.Status == thread.StatusCreated || rec.Status.Terminal() {
		return 0
	}
	return 1
}

// readToReconcile reads rec's transcript strictly; nil when there is
// nothing to reconcile: on a periodic pass, its segments are not ahead of
// the mark by more than the normal lag, or it does not verify (skipped,
// and logged).
func (s *Scheduler) readToReconcile(ctx context.Context, rec *spooltype.Record, trigger string, res *ReconcileResult) (*transcript.Transcript, error) {
	id := rec.ThreadID
	if trigger == TriggerPeriodic {
		n, err := s.o.SegmentCount(ctx, id)
		if err != nil {
			return nil, fmt.Errorf("reconcile %s: %w", id, err)
		}
		if int64(n) <= rec.Transcript.Segments+segmentLag(rec) {
			return nil, nil
		}
	}
	tr, err := s.o.ReadStored(ctx, id, transcript.Strict)
	if errors.Is(err, transcript.ErrTampered) || errors.Is(err, transcript.ErrBadSignature) || errors.Is(err, transcript.ErrUnknownKey) {
		s.log.Warn("reconcile: transcript does not verify; thread left as it is", "thread_id", id, "error", err)
		res.Skipped++
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: %w", id, err)
	}
	return tr, nil
}

// raiseRecord raises rec's transcript mark to its durable segments and
// its version past the last durable checkpoint's (when no activation
// holds it), and counts what it raised.
func (s *Scheduler) raiseRecord(ctx context.Context, rec *spooltype.Record, tr *transcript.Transcript, res *ReconcileResult) (orchestrator.Reconciled, error) {
	id := rec.ThreadID
	var rc orchestrator.Reconciliation
	if m := tr.Mark(); m.Segments > rec.Transcript.Segments+segmentLag(rec) {
		rc.Mark = orchestrator.RecordMark(m)
	}
	if st := tr.LastState; st != nil && !rec.Status.Terminal() && rec.Version < st.Version {
		// The registry lost commits that the transcript holds. Raise the
		// version only where no activation holds the thread: one that
		// does either committed since the loss (and keeps going) or was
		// cut off by it (and its next commit fails anyway).
		held, err := s.o.LeaseHeld(ctx, id)
		if err != nil {
			return orchestrator.Reconciled{}, fmt.Errorf("reconcile %s: %w", id, err)
		}
		if !held {
			rc.MinVersion = st.Version + versionFence
		}
	}
	if rc.Mark == nil && rc.MinVersion <= 0 {
		return orchestrator.Reconciled{}, nil
	}
	got, err := s.o.Reconcile(ctx, id, rc)
	if err != nil {
		return got, err
	}
	if got.MarkRaised() {
		res.Marks++
	}
	if got.VersionRaised() {
		res.Versions++
	}
	return got, nil
}

// recharge applies the turn charges rec's transcript records (charges)
// that the ledger lacks, and counts them; an entry that cannot take them
// (released, gone) is skipped, and logged.
func (s *Scheduler) recharge(ctx context.Context, rec *spooltype.Record, charges []orchestrator.TurnCharge, res *ReconcileResult) ([]orchestrator.TurnCharge, error) {
	applied, err := s.o.Recharge(ctx, rec, charges)
	res.Charges += len(applied)
	if errors.Is(err, orchestrator.ErrReleased) || errors.Is(err, orchestrator.ErrLedgerNotFound) {
		s.log.Warn("reconcile: the ledger entry cannot take the thread's recorded turns", "thread_id", rec.ThreadID,
			"ledger_id", rec.LedgerID(), "error", err)
		res.Skipped++
		err = nil
	}
	return applied, err
}

// restoreChildren restores the children that tr, thread id's transcript,
// names and the registry lost (orchestrator.Housekeeper.Restore), then the children
// that the restored threads' transcripts name and the registry lost, and
// so on down the tree. A child that left nothing durable is its parent's
// to be told of (the worker answers its call thread_lost); one whose
// transcript does not verify or makes no record of it is logged and
// skipped.
func (s *Scheduler) restoreChildren(ctx context.Context, id string, tr *transcript.Transcript, res *ReconcileResult) error {
	type named struct {
		parent string
		tr     *transcript.Transcript
	}
	todo := []named{{id, tr}}
	for len(todo) > 0 {
		n := todo[0]
		todo = todo[1:]
		kids := orchestrator.NamedChildren(n.tr)
		if len(kids) == 0 {
			continue
		}
		known, err := s.o.Statuses(ctx, kids)
		if err != nil {
			return fmt.Errorf("reconcile %s: %w", n.parent, err)
		}
		for _, kid := range kids {
			if _, ok := known[kid]; ok {
				continue
			}
			rs, err := s.o.Restore(ctx, kid, n.parent)
			switch {
			case errors.Is(err, orchestrator.ErrNotDurable):
				s.log.Warn("reconcile: a child the registry lost left nothing durable to restore it from", "thread_id", kid,
					"parent_id", n.parent)
				continue
			case errors.Is(err, orchestrator.ErrNotRestorable) || errors.Is(err, transcript.ErrTampered) ||
				errors.Is(err, transcript.ErrBadSignature) || errors.Is(err, transcript.ErrUnknownKey):
				s.log.Warn("reconcile: a child the registry lost cannot be restored", "thread_id", kid, "parent_id", n.parent,
					"error", err)
				res.Skipped++
				continue
			case err != nil:
				return fmt.Errorf("reconcile %s: restore child %s: %w", n.parent, kid, err)
			}
			res.Restored += len(rs.Threads)
			res.Charges += rs.Charges
			for _, r := range rs.Threads {
				todo = append(todo, named{r.ThreadID, rs.Transcripts[r.ThreadID]})
			}
		}
	}
	return nil
}
