package registry

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spool-run/spool/internal/redisfn"
	"github.com/spool-run/spool/internal/reply"
	"github.com/spool-run/spool/spooltype"
)

// Waiting reasons (the thread hash's waiting_for, Record.WaitingFor).
const (
	WaitingForChildren = "children"
	WaitingForApproval = "approval"
)

// Decisions on a tool call that waits for approval.
const (
	DecisionApprove = "approve"
	DecisionDeny    = "deny"
)

// ErrNotPending means no such tool call waits for a decision (the thread is not
// waiting for approval, or the call was decided already or never asked).
var ErrNotPending = errors.New("nothing pending")

// PendingApproval is a tool call waiting for a person's decision
// (spooltype.PendingApproval).
type PendingApproval = spooltype.PendingApproval

// Decision is a person's decision on a pending call.
type Decision struct {
	Decision string    `json:"decision"` // DecisionApprove or DecisionDeny
	By       string    `json:"by"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
	// RequestID is the request decided (PendingApproval.RequestID),
	// recorded by the decision's script: a decision counts for that
	// request only.
	RequestID string `json:"request_id,omitempty"`
}

// suspendApprovalScript suspends a running thread until people decide its
// pending tool calls (suspend_approval.lua).
var suspendApprovalScript = redisfn.New("suspend_approval", Lua, suspendApprovalLua)

//go:embed suspend_approval.lua
var suspendApprovalLua string

// SuspendForApproval moves a running thread (holding version) to waiting
// until the pending calls are decided. It returns the suspension's
// sequence number (the wake-up and the timeout activation present it to
// Claim) and how many calls are still undecided (0: decisions came before
// the suspension; wake the thread).
func (a *Activations) SuspendForApproval(ctx context.Context, id string, version int64, pending []PendingApproval) (seq, open int64, err error) {
	raw, err := json.Marshal(pending)
	if err != nil {
		return 0, 0, err
	}
	keys := []string{a.ks.Thread(id), a.ks.Events(id), a.ks.AwaitingApproval(id), a.ks.Decisions(id), a.ks.Outbox(id)}
	args := []any{version, a.now().UTC().Format(time.RFC3339Nano), id, string(raw)}
	res, err := suspendApprovalScript.Run(ctx, a.rdb, keys, args...).Int64Slice()
	if err != nil {
		return 0, 0, scriptError(fmt.Sprintf("suspend %s for approval", id), id, version, err)
	}
	if len(res) != 2 {
		return 0, 0, reply.Unexpected("suspend for approval", res)
	}
	return res[0], res[1], nil
}

// decideScript records a decision on pending calls of a thread waiting
// for approval. The thread may be briefly running while its calls are
// pending (a message woke it; it suspends again at the end of the
// activation, counting the decisions recorded meanwhile): the decision is
// recorded all the same, and only a thread that waits is woken
// (decide.lua).
var decideScript = redisfn.New("decide", "", decideLua)

//go:embed decide.lua
var decideLua string

// anyRequest binds a decision to whatever request of the named calls is
// pending (decideScript's ARGV[2]).
const anyRequest = "*"

// Decide records decision d on the pending calls of thread id that
// callIDs name (none: every pending call), whatever request of them is
// pending. It returns the calls decided, and the wake-up to enqueue when
// no pending call is left undecided (nil otherwise). ErrNotPending when
// the thread does not wait for approval or a named call is not pending.
func (a *Activations) Decide(ctx context.Context, id string, callIDs []string, d Decision) ([]string, *Wake, error) {
	return a.decide(ctx, id, anyRequest, callIDs, d)
}

// DecideRequest is Decide on one request for a decision: call callID of
// thread id, and only while the request pending for it is requestID ("":
// a call asked before requests had ids). ErrNotPending otherwise (the
// request was decided, or the call asked again since).
func (a *Activations) DecideRequest(ctx context.Context, id, callID, requestID string, d Decision) ([]string, *Wake, error) {
	if callID == "" {
		return nil, nil, fmt.Errorf("decide %s: no call named", id)
	}
	return a.decide(ctx, id, requestID, []string{callID}, d)
}

func (a *Activations) decide(ctx context.Context, id, request string, callIDs []string, d Decision) ([]string, *Wake, error) {
	if d.Decision != DecisionApprove && d.Decision != DecisionDeny {
		return nil, nil, fmt.Errorf("decide %s: %q is not approve or deny", id, d.Decision)
	}
	d.RequestID = ""
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, nil, err
	}
	args := []any{string(raw), request}
	if len(callIDs) == 0 {
		args = append(args, "*")
	}
	for _, c := range callIDs {
		args = append(args, c)
	}
	res, err := decideScript.Run(ctx, a.rdb, []string{a.ks.Thread(id), a.ks.Decisions(id)}, args...).Slice()
	if err != nil {
		return nil, nil, scriptError("decide "+id, id, 0, err)
	}
	if len(res) == 0 {
		return nil, nil, reply.Unexpected("decide", res)
	}
	decided := reply.Strings(res[:len(res)-1])
	var wake *Wake
	if seq := reply.Int(res[len(res)-1]); seq > 0 {
		wake = &Wake{ThreadID: id, Seq: seq}
	}
	return decided, wake, nil
}

// Decisions returns the decisions recorded on thread id's pending calls,
// by call id.
func (a *Activations) Decisions(ctx context.Context, id string) (map[string]Decision, error) {
	m, err := a.rdb.HGetAll(ctx, a.ks.Decisions(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("decisions of %s: %w", id, err)
	}
	out := make(map[string]Decision, len(m))
	for call, raw := range m {
		var d Decision
		if err := json.Unmarshal([]byte(raw), &d); err != nil {
			return nil, fmt.Errorf("decision on %s of %s: %w", call, id, err)
		}
		out[call] = d
	}
	return out, nil
}

// ClearApprovals forgets thread id's approvals once its worker applied
// the decisions: the decisions, its place in the awaiting set, and the
// record's pending calls.
func (a *Activations) ClearApprovals(ctx context.Context, id string) error {
	pipe := a.rdb.TxPipeline()
	pipe.Del(ctx, a.ks.Decisions(id))
	pipe.SRem(ctx, a.ks.AwaitingApproval(id), id)
	pipe.HDel(ctx, a.ks.Thread(id), "pending_approvals", "approvals_open")
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("clear approvals of %s: %w", id, err)
	}
	return nil
}

// AwaitingApproval lists the threads that may wait for a decision (the
// caller reads each record: one that no longer waits is dropped from the
// set here as it is found).
func (a *Activations) AwaitingApproval(ctx context.Context) ([]string, error) {
	ids, err := members(ctx, a.rdb, a.ks.AllAwaitingApproval())
	if err != nil {
		return nil, fmt.Errorf("threads awaiting approval: %w", err)
	}
	return ids, nil
}

// ForgetAwaiting drops id from the awaiting-approval set.
func (a *Activations) ForgetAwaiting(ctx context.Context, id string) error {
	return a.rdb.SRem(ctx, a.ks.AwaitingApproval(id), id).Err()
}

// WaitingForRateLimit means the thread waits for its model's fleet-wide rate
// limit (ratelimit), with an activation scheduled at wake_at.
const WaitingForRateLimit = "rate_limit"

// WaitingForRetry says a graph run waits out a step's retry backoff, or was
// handed back to go on in a new activation (SuspendUntil); its activation
// is due at wake_at.
const WaitingForRetry = "retry"

// WaitingForSleep says a graph run sleeps at a sleep node; its activation
// is due at wake_at (the sleep's end, or the run's duration limit when
// that comes first).
const WaitingForSleep = "sleep"

// suspendUntilScript suspends a running thread until a time, for a reason
// (suspend_until.lua).
var suspendUntilScript = redisfn.New("suspend_until", "", suspendUntilLua)

//go:embed suspend_until.lua
var suspendUntilLua string

// SuspendUntil moves a running thread (holding version) to waiting, for
// reason (e.g. WaitingForRateLimit), until wakeAt, when the activation
// the caller schedules with the returned seq continues it.
func (a *Activations) SuspendUntil(ctx context.Context, id string, version int64, reason string, wakeAt time.Time) (int64, error) {
	seq, err := suspendUntilScript.Run(ctx, a.rdb, []string{a.ks.Thread(id), a.ks.Events(id)}, version,
		a.now().UTC().Format(time.RFC3339Nano), id, reason, wakeAt.UTC().Format(time.RFC3339Nano)).Int64()
	if err != nil {
		return 0, scriptError(fmt.Sprintf("suspend %s until %s", id, wakeAt.Format(time.RFC3339)), id, version, err)
	}
	return seq, nil
}
