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
	CallID string `json:"call_id"`
	// RequestID is the nonce of this request for a decision, made when the
	// call was gated: call ids repeat (call_1_1 in every thread of a
	// chain, again in a rerun turn), so a decision link carries it and
	// decides this request only (DecideRequest).
	RequestID   string          `json:"request_id,omitempty"`
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
	// RequestID is the request decided (PendingApproval.RequestID),
	// recorded by the decision's script: a decision counts for that
	// request only.
	RequestID string `json:"request_id,omitempty"`
}

// suspendApprovalScript suspends a running thread until people decide its
// pending tool calls.
//
// KEYS[1] thread hash, KEYS[2] events channel, KEYS[3] awaiting-approval
// set, KEYS[4] decisions hash
// ARGV[1] expected version, ARGV[2] now, ARGV[3] thread id, ARGV[4] the
// pending calls (JSON)
// The thread becomes waiting (waiting_for approval, suspend_seq = the new
// version) with approvals_open = the calls not yet decided. A decision
// recorded for another request of a call (its request_id not the pending
// call's) is dropped: it decided a request that is no longer asked.
// Returns {version, open}; refuses CONFLICT <actual>.
var suspendApprovalScript = redis.NewScript(`
local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return redis.error_reply('CONFLICT ' .. v) end
local pending = cjson.decode(ARGV[4])
if type(pending) ~= 'table' then pending = {} end
local open = 0
for _, p in ipairs(pending) do
  local raw = redis.call('HGET', KEYS[4], p.call_id)
  if raw then
    local d = cjson.decode(raw)
    if type(d.request_id) == 'string' and type(p.request_id) == 'string' and d.request_id ~= p.request_id then
      redis.call('HDEL', KEYS[4], p.call_id)
      raw = false
    end
  end
  if not raw then open = open + 1 end
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
// ARGV[1] the decision (JSON), ARGV[2] the request it binds to ("*": any
// request of the named calls; else a call counts only when its
// request_id is this, "" matching a call asked without one),
// ARGV[3..] call ids ("*": every pending call)
// Each call's decision is recorded with the request_id it decided.
// Returns {the decided call ids..., wake seq or 0 as the last element}:
// the seq when no call is left undecided; refuses NOTPENDING <why>.
var decideScript = redis.NewScript(`
local st = redis.call('HMGET', KEYS[1], 'status', 'waiting_for', 'pending_approvals', 'suspend_seq')
if (st[1] ~= 'waiting' and st[1] ~= 'running') or not st[3] or st[3] == '' then
  return redis.error_reply('NOTPENDING the thread is not waiting for approval')
end
local pending = cjson.decode(st[3])
local bind = ARGV[2]
local want = {}
local all = false
for i = 3, #ARGV do
  if ARGV[i] == '*' then all = true else want[ARGV[i]] = true end
end
local out = {}
local reqs = {}
for _, p in ipairs(pending) do
  local rid = p.request_id
  if type(rid) ~= 'string' then rid = '' end
  if bind == '*' or rid == bind then
    local decided = redis.call('HEXISTS', KEYS[2], p.call_id) == 1
    if (all or want[p.call_id]) and not decided then
      table.insert(out, p.call_id)
      table.insert(reqs, rid)
    end
    if not decided then want[p.call_id] = nil end
  end
end
for id, _ in pairs(want) do
  if bind == '*' then
    return redis.error_reply('NOTPENDING call ' .. id .. ' is not waiting for a decision')
  end
  return redis.error_reply('NOTPENDING call ' .. id .. ' is not waiting for a decision on this request')
end
if #out == 0 then return redis.error_reply('NOTPENDING no call is waiting for a decision') end
local d = cjson.decode(ARGV[1])
for i, id in ipairs(out) do
  if reqs[i] ~= '' then d.request_id = reqs[i] else d.request_id = nil end
  redis.call('HSET', KEYS[2], id, cjson.encode(d))
end
local open = redis.call('HINCRBY', KEYS[1], 'approvals_open', -#out)
local wake = 0
if open <= 0 and st[1] == 'waiting' and st[2] == 'approval' then wake = tonumber(st[4]) end
table.insert(out, wake)
return out
`)

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

// WaitingForRetry: a graph run waits out a step's retry backoff, or was
// handed back to go on in a new activation (SuspendUntil); its activation
// is due at wake_at.
const WaitingForRetry = "retry"

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
