-- cancel.lua sets a thread's cancel flag and publishes "<id> cancel" on
-- the control channel, and on the events channel too, where workers of
-- earlier versions listen for it (waiters ignore it: it is no status).
-- The version is not bumped: a cancel request must not break the running
-- activation's lease; the activation sees the flag and stops itself.
--
-- KEYS[1] thread hash, KEYS[2] control channel, KEYS[3] events channel
-- ARGV[1] thread id, ARGV[2] cascade to children ("1" or "0"; a "1" once
-- set stays)
-- Returns the thread's status; refuses NOTFOUND <id>.

local st = redis.call('HGET', KEYS[1], 'status')
if not st then return redis.error_reply('NOTFOUND ' .. ARGV[1]) end
redis.call('HSET', KEYS[1], 'cancel_requested', '1')
if ARGV[2] == '1' or redis.call('HGET', KEYS[1], 'cancel_cascade') ~= '1' then
  redis.call('HSET', KEYS[1], 'cancel_cascade', ARGV[2])
end
redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' cancel')
redis.call('PUBLISH', KEYS[3], ARGV[1] .. ' cancel')
return st
