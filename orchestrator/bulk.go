package orchestrator

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/registry"
	"github.com/spool-run/spool/thread"
)

// Bulk operations. `spool thread bulk ACTION FILTER...` and POST /v1/bulk
// act on every run a filter selects, as a durable operation with an id:
//
//  1. StartBulk lists the runs the filter selects that the action can act
//     on (cancel: runs not finished; resume: runs finished in error,
//     cancelled or completed and not resumed or continued yet; approve and
//     deny: runs waiting for a decision) and stores their ids, in listing
//     order, with the operation's record (status running, matched). A dry
//     run counts them and stores nothing. The list is fixed then: a run
//     that starts to match later is not touched.
//  2. RunBulk acts on the runs one at a time under a lease
//     (bulk_claim.lua), and records each run's outcome and moves past it
//     in one script (bulk_step.lua), so each run is counted once. Whoever
//     made the operation runs it (the CLI in the foreground, the API in
//     the background); when that process dies its lease lapses and a
//     scheduler process adopts the operation (OrphanedBulks) and finishes
//     it.
//  3. Every action is one a run takes once however often it is asked:
//     a cancel of a run already cancelled or finished is nothing, a
//     resume of a run already resumed is refused, a decision on a run
//     that no longer waits is refused. So the run a dead runner acted on
//     but did not record is acted on again by its adopter with no second
//     effect: exactly one effect per run.
//
// done counts the runs acted on, skipped among them those that no longer
// needed it (finished, decided or resumed by someone else meanwhile);
// failed the runs the action failed on, each with its error.

// Bulk actions.
const (
	BulkCancel  = "cancel"
	BulkResume  = "resume"
	BulkApprove = "approve"
	BulkDeny    = "deny"
)

// BulkActions lists the actions a bulk operation takes.
var BulkActions = []string{BulkCancel, BulkResume, BulkApprove, BulkDeny}

// Bulk operation statuses.
const (
	BulkRunning   = "running"
	BulkCompleted = "completed"
)

// DefaultResumeMessage is the message a bulk resume gives the threads it
// resumes when it is given none (a graph run takes none).
const DefaultResumeMessage = "Continue from where you stopped."

// bulkLease is how long a runner holds an operation without a step: past
// it another process adopts it.
const bulkLease = 15 * time.Second

// bulkRetention is how long an operation's record and run list are kept.
const bulkRetention = 30 * 24 * time.Hour

// bulkPage is how many runs a listing or a runner reads at a time.
const bulkPage = 1000

var (
	bulkClaimScript = redisfn.New("bulk_claim", "", bulkClaimLua)
	bulkStepScript  = redisfn.New("bulk_step", "", bulkStepLua)
)

//go:embed bulk_claim.lua
var bulkClaimLua string

//go:embed bulk_step.lua
var bulkStepLua string

// ErrBulkNotFound is a bulk operation id nobody made (or one made for
// another tenant, to a caller bound to a tenant).
var ErrBulkNotFound = errors.New("bulk operation not found")

// BulkFilter selects the runs of a bulk operation, as `thread list`'s
// filters do.
type BulkFilter struct {
	Tags      map[string]string `json:"tags,omitempty"`
	Status    thread.Status     `json:"status,omitempty"`
	Directive string            `json:"directive,omitempty"`
	// Kind is "graph" or "thread" for only those; "" for both.
	Kind   string    `json:"kind,omitempty"`
	Tenant string    `json:"tenant,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	Until  time.Time `json:"until,omitzero"`
}

// BulkRequest asks for a bulk operation.
type BulkRequest struct {
	Action string
	Filter BulkFilter
	// Message is what a resumed thread continues with
	// (DefaultResumeMessage when empty).
	Message string
	// By is who decides (approve, deny) or asks; Reason why.
	By, Reason string
	// DryRun counts the runs the operation would act on and makes
	// nothing.
	DryRun bool
}

// BulkStarted is what StartBulk made: the operation (none for a dry run)
// and how many runs it matched.
type BulkStarted struct {
	Operation string `json:"operation,omitempty"`
	Matched   int64  `json:"matched"`
}

// BulkOperation is a bulk operation as it stands.
type BulkOperation struct {
	ID      string     `json:"id"`
	Action  string     `json:"action"`
	Status  string     `json:"status"`
	Matched int64      `json:"matched"`
	Done    int64      `json:"done"`
	Failed  int64      `json:"failed"`
	Skipped int64      `json:"skipped"`
	Filter  BulkFilter `json:"filter"`
	Message string     `json:"message,omitempty"`
	By      string     `json:"by,omitempty"`
	Reason  string     `json:"reason,omitempty"`
	// Adoptions counts the times a process took the operation over from
	// one that died or stalled.
	Adoptions  int64  `json:"adoptions,omitempty"`
	CreatedAt  string `json:"created_at"`
	FinishedAt string `json:"finished_at,omitempty"`
	// Failures are the runs the action failed on: run id → error.
	Failures map[string]string `json:"failures,omitempty"`
}

// CheckBulkAction refuses an action that is not one of BulkActions.
func CheckBulkAction(action string) error {
	for _, a := range BulkActions {
		if a == action {
			return nil
		}
	}
	return fmt.Errorf("bulk action %q: want one of %s", action, strings.Join(BulkActions, ", "))
}

// bulkEligible says whether action can act on rec.
func bulkEligible(action string, rec *registry.Record) bool {
	switch action {
	case BulkCancel:
		return !rec.Status.Terminal()
	case BulkResume:
		return rec.Status.Resumable() && rec.ContinuationThreadID == ""
	default: // approve, deny
		return rec.Status == thread.StatusWaiting && rec.WaitingFor == registry.WaitingForApproval
	}
}

// StartBulk makes the bulk operation req asks for (see above), or with
// DryRun counts what it would act on. The caller runs it (RunBulk).
func (o *Orchestrator) StartBulk(ctx context.Context, req BulkRequest) (*BulkStarted, error) {
	if err := CheckBulkAction(req.Action); err != nil {
		return nil, err
	}
	if (req.Action == BulkApprove || req.Action == BulkDeny) && strings.TrimSpace(req.By) == "" {
		return nil, errors.New("bulk " + req.Action + ": who decides (by) is required")
	}
	id := newBulkID(o.Now())
	var matched int64
	err := o.eachBulkPage(ctx, req, func(ids []string) error {
		matched += int64(len(ids))
		if req.DryRun {
			return nil
		}
		pipe := o.rdb.Pipeline()
		pipe.RPush(ctx, o.keys.BulkRuns(id), toAny(ids)...)
		pipe.Expire(ctx, o.keys.BulkRuns(id), bulkRetention)
		_, err := pipe.Exec(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bulk %s: %w", req.Action, err)
	}
	if req.DryRun {
		return &BulkStarted{Matched: matched}, nil
	}
	filter, err := json.Marshal(req.Filter)
	if err != nil {
		return nil, err
	}
	now := o.Now()
	status := BulkRunning
	fields := []any{"action", req.Action, "filter", string(filter), "message", req.Message, "by", req.By, "reason", req.Reason,
		"tenant", req.Filter.Tenant, "matched", matched, "next", 0, "done", 0, "failed", 0, "skipped", 0,
		"created_at", now.UTC().Format(time.RFC3339Nano), "owner", ""}
	if matched == 0 {
		status = BulkCompleted
		fields = append(fields, "finished_at", now.UTC().Format(time.RFC3339Nano))
	}
	fields = append(fields, "status", status)
	tx := o.rdb.TxPipeline()
	tx.HSet(ctx, o.keys.Bulk(id), fields...)
	tx.Expire(ctx, o.keys.Bulk(id), bulkRetention)
	if status == BulkRunning {
		tx.ZAdd(ctx, o.keys.BulkRunning(), redis.Z{Score: float64(now.UnixMilli()), Member: id})
	}
	tx.ZAdd(ctx, o.keys.BulkAll(), redis.Z{Score: float64(now.UnixMilli()), Member: id})
	if _, err := tx.Exec(ctx); err != nil {
		return nil, fmt.Errorf("bulk %s: record the operation: %w", req.Action, err)
	}
	o.log.Info("bulk operation made", "operation", id, "action", req.Action, "matched", matched)
	return &BulkStarted{Operation: id, Matched: matched}, nil
}

// eachBulkPage calls fn with each page of the ids of the runs req acts
// on, newest first.
func (o *Orchestrator) eachBulkPage(ctx context.Context, req BulkRequest, fn func([]string) error) error {
	f := Filter{Status: req.Filter.Status, Directive: req.Filter.Directive, Kind: req.Filter.Kind, Tenant: req.Filter.Tenant,
		Tags: req.Filter.Tags, Since: req.Filter.Since, Until: req.Filter.Until, Limit: bulkPage}
	for {
		recs, next, err := o.ThreadsPage(ctx, f)
		if err != nil {
			return err
		}
		ids := make([]string, 0, len(recs))
		for _, r := range recs {
			if bulkEligible(req.Action, r) {
				ids = append(ids, r.ThreadID)
			}
		}
		if len(ids) > 0 {
			if err := fn(ids); err != nil {
				return err
			}
		}
		if next == "" {
			return nil
		}
		cur, err := ParseCursor(next)
		if err != nil {
			return err
		}
		f.After = &cur
	}
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// newBulkID names a bulk operation: "bulk-" + the time + 8 random hex
// digits.
func newBulkID(now time.Time) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return "bulk-" + now.UTC().Format("20060102T150405") + "-" + hex.EncodeToString(b[:])
}

// CheckBulkID refuses a string that is not a bulk operation id.
func CheckBulkID(id string) error {
	rest, ok := strings.CutPrefix(id, "bulk-")
	if !ok || len(rest) != len("20060102T150405-01234567") || strings.ContainsAny(rest, ":{}* \t\n") {
		return fmt.Errorf("bulk operation %q: not an operation id (bulk-YYYYMMDDTHHMMSS-XXXXXXXX)", id)
	}
	return nil
}

// Bulk reads bulk operation id. tenant, when not "", is the caller's
// tenant: another tenant's operation is ErrBulkNotFound.
func (o *Orchestrator) Bulk(ctx context.Context, id, tenant string) (*BulkOperation, error) {
	if CheckBulkID(id) != nil {
		return nil, ErrBulkNotFound
	}
	m, err := o.rdb.HGetAll(ctx, o.keys.Bulk(id)).Result()
	if err != nil {
		return nil, err
	}
	if len(m) == 0 || tenant != "" && m["tenant"] != tenant {
		return nil, ErrBulkNotFound
	}
	op := &BulkOperation{ID: id, Action: m["action"], Status: m["status"], Message: m["message"], By: m["by"], Reason: m["reason"],
		CreatedAt: m["created_at"], FinishedAt: m["finished_at"]}
	for k, to := range map[string]*int64{"matched": &op.Matched, "done": &op.Done, "failed": &op.Failed, "skipped": &op.Skipped, "adoptions": &op.Adoptions} {
		*to, _ = strconv.ParseInt(m[k], 10, 64)
	}
	if err := json.Unmarshal([]byte(m["filter"]), &op.Filter); err != nil {
		return nil, fmt.Errorf("bulk operation %s: filter: %w", id, err)
	}
	if op.Failed > 0 {
		if op.Failures, err = o.rdb.HGetAll(ctx, o.keys.BulkFailures(id)).Result(); err != nil {
			return nil, err
		}
	}
	return op, nil
}

// RunBulk runs bulk operation id as owner (a token of the calling
// process) until it is completed, another process holds it, or ctx ends,
// and returns the operation as it is then. progress, when not nil, is
// called after each run.
func (o *Orchestrator) RunBulk(ctx context.Context, id, owner string, progress func(done, failed, matched int64)) (*BulkOperation, error) {
	idx, retry, held, err := o.claimBulk(ctx, id, owner)
	if err != nil {
		return nil, err
	}
	op, err := o.Bulk(ctx, id, "") // as it stands under the claim
	if err != nil || !held {
		return op, err
	}
	done, failed := op.Done, op.Failed
	for idx < op.Matched {
		ids, err := o.rdb.LRange(ctx, o.keys.BulkRuns(id), idx, idx+bulkPage/10-1).Result()
		if err != nil {
			return nil, err
		}
		if len(ids) == 0 {
			return nil, fmt.Errorf("bulk %s: the run list ends at %d of %d", id, idx, op.Matched)
		}
		for _, run := range ids {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			outcome, ok, err := o.bulkOne(ctx, op, owner, idx, run, retry)
			if err != nil || !ok {
				return nil, err
			}
			retry = false
			idx++
			if outcome == "failed" {
				failed++
			} else {
				done++
			}
			if progress != nil {
				progress(done, failed, op.Matched)
			}
		}
	}
	return o.Bulk(ctx, id, "")
}

// bulkOne acts on run, at index idx of op, and records it (bulkStep):
// ok false with no error when owner no longer holds op there.
func (o *Orchestrator) bulkOne(ctx context.Context, op *BulkOperation, owner string, idx int64, run string, retry bool) (string, bool, error) {
	outcome, msg := o.bulkApply(ctx, op, run, retry)
	ok, err := o.bulkStep(ctx, op, owner, idx, outcome, run, msg)
	if err == nil && !ok {
		o.log.Warn("bulk operation taken over", "operation", op.ID, "at", idx)
	}
	return outcome, ok, err
}

// claimBulk claims operation id for owner (bulk_claim.lua): held says
// it holds it now, idx the first run not acted on, retry that another
// runner held it before (and may have acted on that run).
func (o *Orchestrator) claimBulk(ctx context.Context, id, owner string) (idx int64, retry, held bool, err error) {
	res, err := bulkClaimScript.Run(ctx, o.fast, []string{o.keys.Bulk(id)}, owner, o.Now().UnixMilli(), bulkLease.Milliseconds()).Slice()
	if err != nil {
		return 0, false, false, fmt.Errorf("bulk %s: claim: %w", id, err)
	}
	switch {
	case len(res) > 0 && reply.Int(res[0]) == -1:
		return 0, false, false, ErrBulkNotFound
	case len(res) == 0 || reply.Int(res[0]) != 1:
		return 0, false, false, nil
	case len(res) != 3:
		return 0, false, false, reply.Unexpected("bulk_claim", res)
	}
	if prev := reply.String(res[2]); prev != "" {
		o.log.Info("bulk operation adopted", "operation", id, "from", prev, "next", reply.Int(res[1]))
		retry = true
	}
	return reply.Int(res[1]), retry, true, nil
}

// bulkStep records outcome of run, at index idx of op, and moves past it
// (bulk_step.lua); false when owner no longer holds op there.
func (o *Orchestrator) bulkStep(ctx context.Context, op *BulkOperation, owner string, idx int64, outcome, run, msg string) (bool, error) {
	now := o.Now()
	res, err := bulkStepScript.Run(ctx, o.fast, []string{o.keys.Bulk(op.ID), o.keys.BulkFailures(op.ID), o.keys.BulkRunning()},
		owner, idx, outcome, run, msg, now.UnixMilli(), bulkLease.Milliseconds(), op.ID, now.UTC().Format(time.RFC3339Nano)).Slice()
	if err != nil {
		return false, fmt.Errorf("bulk %s: record run %s: %w", op.ID, run, err)
	}
	return len(res) > 0 && reply.Int(res[0]) == 1, nil
}

// bulkApply takes op's action on run and says how it went: done,
// skipped (the run no longer needed it) or failed with the error. retry
// says a runner before this one may have acted on the run and died
// before recording it: a refusal that the action was taken already is
// then the action done.
func (o *Orchestrator) bulkApply(ctx context.Context, op *BulkOperation, run string, retry bool) (outcome, msg string) {
	taken := "skipped"
	if retry {
		taken = "done"
	}
	var err error
	switch op.Action {
	case BulkCancel:
		var res *CancelResult
		if res, err = o.CancelChain(ctx, run, true); err == nil && !res.CancelRequested {
			return taken, ""
		}
	case BulkResume:
		err = o.bulkResume(ctx, op, run)
		var nr *NotResumableError
		if errors.As(err, &nr) {
			return taken, ""
		}
	default:
		decision := DecisionApprove
		if op.Action == BulkDeny {
			decision = DecisionDeny
		}
		_, err = o.Decide(ctx, run, nil, decision, op.By, op.Reason)
		if errors.Is(err, registry.ErrNotPending) {
			return taken, ""
		}
	}
	switch {
	case err == nil:
		return "done", ""
	case errors.Is(err, registry.ErrNotFound):
		return "skipped", "" // forgotten since it matched
	default:
		o.threadLog(run).Warn("bulk action failed", "operation", op.ID, "action", op.Action, "error", err)
		return "failed", err.Error()
	}
}

// bulkResume resumes run: a graph run from its last checkpoint, a thread
// with op's message.
func (o *Orchestrator) bulkResume(ctx context.Context, op *BulkOperation, run string) error {
	rec, err := o.reg.Get(ctx, run)
	if err != nil {
		return err
	}
	if rec.IsGraph() {
		_, err = o.ResumeGraph(ctx, run, GraphResumeRequest{})
		return err
	}
	msg := op.Message
	if strings.TrimSpace(msg) == "" {
		msg = DefaultResumeMessage
	}
	_, err = o.Resume(ctx, run, msg)
	return err
}

// OrphanedBulks lists the running bulk operations whose runner's lease
// lapsed (it died or stalled), oldest first, at most 100.
func (o *Orchestrator) OrphanedBulks(ctx context.Context) ([]string, error) {
	ids, err := o.rdb.ZRange(ctx, o.keys.BulkRunning(), 0, 99).Result()
	if err != nil {
		return nil, err
	}
	now := o.Now().UnixMilli()
	var out []string
	for _, id := range ids {
		v, err := o.rdb.HMGet(ctx, o.keys.Bulk(id), "status", "lease_until").Result()
		if err != nil {
			return nil, err
		}
		if v[0] == nil { // expired: tidy the index
			o.rdb.ZRem(ctx, o.keys.BulkRunning(), id)
			continue
		}
		until, _ := strconv.ParseInt(fmt.Sprint(v[1]), 10, 64)
		if v[0] == BulkRunning && until <= now {
			out = append(out, id)
		}
	}
	return out, nil
}

// Bulks lists the bulk operations newest first, at most limit (tenant,
// when not "": that tenant's only).
func (o *Orchestrator) Bulks(ctx context.Context, tenant string, limit int) ([]*BulkOperation, error) {
	ids, err := o.rdb.ZRevRange(ctx, o.keys.BulkAll(), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	var out []*BulkOperation
	for _, id := range ids {
		if limit > 0 && len(out) >= limit {
			break
		}
		op, err := o.Bulk(ctx, id, tenant)
		if errors.Is(err, ErrBulkNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, op)
	}
	return out, nil
}
