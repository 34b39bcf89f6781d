-- suspend_until.lua suspends a running thread until a time, for a reason.
--
-- KEYS[1] thread hash, KEYS[2] events channel
-- ARGV[1] expected version, ARGV[2] now, ARGV[3] thread id, ARGV[4]
-- reason (waiting_for), ARGV[5] wake_at (RFC 3339)
-- Returns the new version (the suspension's seq); refuses CONFLICT
-- <actual>.

local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return redis.error_reply('CONFLICT ' .. v) end
v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'status', 'waiting', 'suspend_seq', v, 'waiting_for', ARGV[4], 'wake_at', ARGV[5], 'updated_at', ARGV[2])
local st = 'waiting'
if redis.call('HGET', KEYS[1], 'pause_requested') == '1' then
  -- A pause asked while the thread ran applies at its suspension: it is
  -- paused, and waits for its time again when unpaused (pause.lua).
  local t = redis.call('TIME')
  st = 'paused'
  redis.call('HSET', KEYS[1], 'status', st, 'paused_from', ARGV[4], 'paused_at', t[1] * 1000 + math.floor(t[2] / 1000))
end
redis.call('PUBLISH', KEYS[2], ARGV[3] .. ' ' .. st)
return v
