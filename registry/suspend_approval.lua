-- suspend_approval.lua suspends a running thread until people decide its
-- pending tool calls.
--
-- KEYS[1] thread hash, KEYS[2] events channel, KEYS[3] awaiting-approval
-- set, KEYS[4] decisions hash, KEYS[5] its shard's outbox
-- ARGV[1] expected version, ARGV[2] now, ARGV[3] thread id, ARGV[4] the
-- pending calls (JSON)
-- The thread becomes waiting (waiting_for approval, suspend_seq = the new
-- version) with approvals_open = the calls not yet decided. A decision
-- recorded for another request of a call (its request_id not the pending
-- call's) is dropped: it decided a request that is no longer asked.
-- When the tree has webhooks (the record's webhooks field), the wait is
-- a run.waiting_approval event in the outbox (one per suspension: its
-- key is the new version).
-- Returns {version, open}; refuses CONFLICT <actual>.

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
local st = 'waiting'
if redis.call('HGET', KEYS[1], 'pause_requested') == '1' then
  -- A pause asked while the thread ran applies at its suspension: it is
  -- paused, and waits for the decisions again when unpaused (pause.lua).
  local t = redis.call('TIME')
  st = 'paused'
  redis.call('HSET', KEYS[1], 'status', st, 'paused_from', 'approval', 'paused_at', t[1] * 1000 + math.floor(t[2] / 1000))
end
redis.call('SADD', KEYS[3], ARGV[3])
redis.call('PUBLISH', KEYS[2], ARGV[3] .. ' ' .. st)
if open > 0 and redis.call('HGET', KEYS[1], 'webhooks') == '1' then
  registry.event(KEYS[5], ARGV[3], 'run.waiting_approval', ARGV[2], tostring(v))
end
return {v, open}
