package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/reply"
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

// PendingApproval is a tool call waiting for a person's decision.
type PendingApproval struct {
	CallID      string          `json:"call_id"`
	Tool        string          `json:"tool"`
	Input       json.RawMessage `json:"input"`
	RequestedAt time.Time       `json:"requested_at"`
	// Deadline, when set, is when OnTimeout decides the call.
	Deadline  time.Time `json:"deadline,omitzero"`
	OnTimeout string    `json:"on_timeout,omitempty"`
}

// Decision is a person's decision on a pending call.
type Decision struct {
	Decision string    `json:"decision"` // DecisionApprove or DecisionDeny
	By       string    `json:"by"`
	Reason   string    `json:"reason,omitempty"`
	At       time.Time `json:"at"`
}

// suspendApprovalScript suspends a running thread until people decide its
// pending tool calls.
//
// KEYS[1] thread hash, KEYS[2] events channel, KEYS[3] awaiting-approval
// set, KEYS[4] decisions hash
// ARGV[1] expected version, ARGV[2] now, ARGV[3] thread id, ARGV[4] the
// pending calls (JSON), ARGV[5..] their call ids
// The thread becomes waiting (waiting_for approval, suspend_seq = the new
// version) with approvals_open = the calls not yet decided. Returns
// {version, open}; refuses CONFLICT <actual>.
var suspendApprovalScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return redis.error_reply('CONFLICT ' .. v) end
local open = 0
for i = 5, #ARGV do
  if redis.call('HEXISTS', KEYS[4], ARGV[i]) == 0 then open = open + 1 end
end
v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'status', 'waiting', 'suspend_seq', v, 'waiting_for', 'approval',
  'pending_approvals', ARGV[4], 'approvals_open', open, 'updated_at', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[3])
redis.call('PUBLISH', KEYS[2], ARGV[3] .. ' waiting')
return {v, open}
`)

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
	keys := []string{a.ks.Thread(id), a.ks.Events(id), a.ks.AwaitingApproval(id), a.ks.Decisions(id)}
	args := []any{version, a.now().UTC().Format(time.RFC3339Nano), id, string(raw)}
	for _, p := range pending {
		args = append(args, p.CallID)
	}
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
// recorded all the same, and only a thread that waits is woken.
//
// KEYS[1] thread hash, KEYS[2] decisions hash
// ARGV[1] the decision (JSON), ARGV[2..] call ids ("*": every pending call)
// Returns {the decided call ids..., wake seq or 0 as the last element}:
// the seq when no call is left undecided; refuses NOTPENDING <why>.
var decideScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'waiting_for', 'pending_approvals', 'suspend_seq')
if (st[1] ~= 'waiting' and st[1] ~= 'running') or not st[3] or st[3] == '' then
  return redis.error_reply('NOTPENDING the thread is not waiting for approval')
end
local pending = cjson.decode(st[3])
local want = {}
local all = false
for i = 2, #ARGV do
  if ARGV[i] == '*' then all = true else want[ARGV[i]] = true end
end
local out = {}
for _, p in ipairs(pending) do
  local decided = redis.call('HEXISTS', KEYS[2], p.call_id) == 1
  if (all or want[p.call_id]) and not decided then
    table.insert(out, p.call_id)
  end
  if not decided then want[p.call_id] = nil end
end
for id, _ in pairs(want) do
  return redis.error_reply('NOTPENDING call ' .. id .. ' is not waiting for a decision')
end
if #out == 0 then return redis.error_reply('NOTPENDING no call is waiting for a decision') end
for _, id in ipairs(out) do redis.call('HSET', KEYS[2], id, ARGV[1]) end
local open = redis.call('HINCRBY', KEYS[1], 'approvals_open', -#out)
local wake = 0
if open <= 0 and st[1] == 'waiting' and st[2] == 'approval' then wake = tonumber(st[4]) end
table.insert(out, wake)
return out
`)

// Decide records decision d on the pending calls of thread id that
// callIDs name (none: every pending call). It returns the calls decided,
// and the wake-up to enqueue when no pending call is left undecided (nil
// otherwise). ErrNotPending when the thread does not wait for approval or
// a named call is not pending.
func (a *Activations) Decide(ctx context.Context, id string, callIDs []string, d Decision) ([]string, *Wake, error) {
	if d.Decision != DecisionApprove && d.Decision != DecisionDeny {
		return nil, nil, fmt.Errorf("decide %s: %q is not approve or deny", id, d.Decision)
	}
	raw, err := json.Marshal(d)
	if err != nil {
		return nil, nil, err
	}
	args := []any{string(raw)}
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

// suspendUntilScript suspends a running thread until a time, for a reason.
//
// KEYS[1] thread hash, KEYS[2] events channel
// ARGV[1] expected version, ARGV[2] now, ARGV[3] thread id, ARGV[4]
// reason (waiting_for), ARGV[5] wake_at (RFC 3339)
// Returns the new version (the suspension's seq); refuses CONFLICT
// <actual>.
var suspendUntilScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return redis.error_reply('CONFLICT ' .. v) end
v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'status', 'waiting', 'suspend_seq', v, 'waiting_for', ARGV[4], 'wake_at', ARGV[5], 'updated_at', ARGV[2])
redis.call('PUBLISH', KEYS[2], ARGV[3] .. ' waiting')
return v
`)

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
