-- send_message.lua keeps a message for a graph run that has not ended
-- (a wait_message node takes it: spec 4.8).
--
-- KEYS[1] run hash, KEYS[2] messages list, KEYS[3] message ids hash
-- ARGV[1] message name, ARGV[2] message id ("" for none), ARGV[3]
-- message JSON without seq (its "seq" is set here: "{"seq":N,...}" is
-- built by splicing)
-- Returns {seq, status, wake_seq, duplicate}: wake_seq is the run's
-- suspension to wake when it waits for a message of this name (0
-- otherwise); duplicate 1 when a message of this id was kept before (its
-- seq is returned, nothing is stored). Refuses NOTFOUND, FINISHED
-- <status>.

local st = redis.call('HMGET', KEYS[1], 'status', 'suspend_seq', 'waiting_for', 'message_name')
if not st[1] then return redis.error_reply('NOTFOUND') end
if st[1] == 'completed' or st[1] == 'error' or st[1] == 'cancelled' or st[1] == 'continued' then
  return redis.error_reply('FINISHED ' .. st[1])
end
if ARGV[2] ~= '' then
  local prev = redis.call('HGET', KEYS[3], ARGV[2])
  if prev then return {tonumber(prev), st[1], 0, 1} end
end
local seq = redis.call('HINCRBY', KEYS[1], 'message_seq', 1)
redis.call('RPUSH', KEYS[2], '{"seq":' .. seq .. ',' .. string.sub(ARGV[3], 2))
if ARGV[2] ~= '' then redis.call('HSET', KEYS[3], ARGV[2], seq) end
local wake = 0
if st[1] == 'waiting' and st[3] == 'message' and st[4] == ARGV[1] then wake = tonumber(st[2] or '0') end
return {seq, st[1], wake, 0}
