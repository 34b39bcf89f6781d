-- unpause.lua lets a paused thread go on (`spool thread unpause`).
--
-- KEYS[1] thread hash, KEYS[2] events channel
-- ARGV[1] thread id, ARGV[2] now (RFC3339Nano), ARGV[3] now (unix ms)
-- The pause request goes. A paused thread becomes waiting again: for what
-- it waited for when it was paused (paused_from), or, when its activation
-- paused it at a boundary, for its wake-up (waiting_for unpaused), which
-- the caller enqueues (housekeeping does, should it die first:
-- StalledWaits). The time it was paused is added to paused_ms, which its
-- duration limit does not count.
-- Returns {status now, suspend seq when it waits again, else 0};
-- refuses NOTFOUND <id>.

local h = redis.call('HMGET', KEYS[1], 'status', 'paused_from', 'paused_at', 'suspend_seq', 'version', 'paused_ms')
local st = h[1]
if not st then return redis.error_reply('NOTFOUND ' .. ARGV[1]) end
redis.call('HDEL', KEYS[1], 'pause_requested')
if st ~= 'paused' then return {st, 0} end
local from = h[2] or ''
if from == '' then from = 'unpaused' end
local ms = (tonumber(h[6]) or 0) + math.max(tonumber(ARGV[3]) - (tonumber(h[3]) or tonumber(ARGV[3])), 0)
redis.call('HSET', KEYS[1], 'status', 'waiting', 'waiting_for', from, 'paused_ms', ms,
  'version', (tonumber(h[5]) or 0) + 1, 'updated_at', ARGV[2])
redis.call('HDEL', KEYS[1], 'paused_from', 'paused_at')
redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' waiting')
return {'waiting', tonumber(h[4]) or 0}
