-- decide.lua records a decision on pending calls of a thread waiting for
-- approval. The thread may be briefly running while its calls are pending
-- (a message woke it; it suspends again at the end of the activation,
-- counting the decisions recorded meanwhile), or paused: the decision is
-- recorded all the same, and only a thread that waits is woken (a paused
-- one by its unpause).
--
-- KEYS[1] thread hash, KEYS[2] decisions hash
-- ARGV[1] the decision (JSON), ARGV[2] the request it binds to ("*": any
-- request of the named calls; else a call counts only when its
-- request_id is this, "" matching a call asked without one),
-- ARGV[3..] call ids ("*": every pending call)
-- Each call's decision is recorded with the request_id it decided.
-- Returns {the decided call ids..., wake seq or 0 as the last element}:
-- the seq when no call is left undecided; refuses NOTPENDING <why>.

local st = redis.call('HMGET', KEYS[1], 'status', 'waiting_for', 'pending_approvals', 'suspend_seq')
if (st[1] ~= 'waiting' and st[1] ~= 'running' and st[1] ~= 'paused') or not st[3] or st[3] == '' then
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
