-- suspend_message.lua suspends a running graph run until a message of a
-- name comes (or a time: the wait's timeout), unless one has already.
--
-- KEYS[1] run hash, KEYS[2] events channel, KEYS[3] messages list
-- ARGV[1] expected version, ARGV[2] now, ARGV[3] run id, ARGV[4] message
-- name, ARGV[5] the seq up to which the run has taken messages of the
-- name, ARGV[6] wake_at (RFC 3339; "" when only a message wakes it)
-- Returns {new version} (the suspension's seq), or {0} when a message of
-- the name past ARGV[5] is kept: the run takes it instead of waiting.
-- Refuses CONFLICT <actual>.

local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return redis.error_reply('CONFLICT ' .. v) end
local after = tonumber(ARGV[5])
for _, raw in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local ok, m = pcall(cjson.decode, raw)
  if ok and m.name == ARGV[4] and tonumber(m.seq) > after then return {0} end
end
v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'status', 'waiting', 'suspend_seq', v, 'waiting_for', 'message', 'message_name', ARGV[4],
  'message_after', ARGV[5], 'updated_at', ARGV[2])
if ARGV[6] ~= '' then
  redis.call('HSET', KEYS[1], 'wake_at', ARGV[6])
else
  redis.call('HDEL', KEYS[1], 'wake_at')
end
local st = 'waiting'
if redis.call('HGET', KEYS[1], 'pause_requested') == '1' then
  -- A pause asked while the thread ran applies at its suspension: it is
  -- paused, and waits for its message again when unpaused (pause.lua).
  local t = redis.call('TIME')
  st = 'paused'
  redis.call('HSET', KEYS[1], 'status', st, 'paused_from', 'message', 'paused_at', t[1] * 1000 + math.floor(t[2] / 1000))
end
redis.call('PUBLISH', KEYS[2], ARGV[3] .. ' ' .. st)
return {v}
