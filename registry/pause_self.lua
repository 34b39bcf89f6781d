-- pause_self.lua pauses a running thread at a boundary of its activation
-- (between turns, between graph steps), when a pause was requested.
--
-- KEYS[1] thread hash, KEYS[2] events channel
-- ARGV[1] expected version, ARGV[2] now (RFC3339Nano), ARGV[3] now (unix
-- ms), ARGV[4] thread id
-- The thread, checkpointed by its activation, becomes paused
-- (suspend_seq = the new version, paused_from ""): its unpause wakes it
-- with that seq. An unpause that came first (no pause_requested any more)
-- leaves it running: 0.
-- Returns the new version, or 0; refuses CONFLICT <actual>.

local h = redis.call('HMGET', KEYS[1], 'version', 'pause_requested')
local v = tonumber(h[1] or '0')
if v ~= tonumber(ARGV[1]) then return redis.error_reply('CONFLICT ' .. v) end
if h[2] ~= '1' then return 0 end
v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'status', 'paused', 'suspend_seq', v, 'waiting_for', '', 'paused_from', '',
  'paused_at', ARGV[3], 'updated_at', ARGV[2])
redis.call('PUBLISH', KEYS[2], ARGV[4] .. ' paused')
return v
