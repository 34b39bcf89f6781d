-- send.lua queues a message for a thread that has not finished.
--
-- KEYS[1] thread hash, KEYS[2] inbox list, KEYS[3] control channel
-- ARGV[1] thread id, ARGV[2] message JSON without seq (its "seq" is set
-- here: "{"seq":N,...}" is built by splicing), ARGV[3] "1": interrupt
-- Returns {seq, status, suspend_seq}; refuses NOTFOUND, FINISHED
-- <status>. An interrupt is published on the control channel as "<id>
-- interrupt", so the worker running the thread stops the work in flight.

local st = redis.call('HMGET', KEYS[1], 'status', 'suspend_seq')
if not st[1] then return redis.error_reply('NOTFOUND') end
if st[1] == 'completed' or st[1] == 'error' or st[1] == 'cancelled' or st[1] == 'continued' then
  return redis.error_reply('FINISHED ' .. st[1])
end
local seq = redis.call('HINCRBY', KEYS[1], 'inbox_seq', 1)
redis.call('RPUSH', KEYS[2], '{"seq":' .. seq .. ',' .. string.sub(ARGV[2], 2))
if ARGV[3] == '1' then redis.call('PUBLISH', KEYS[3], ARGV[1] .. ' interrupt') end
return {seq, st[1], tonumber(st[2] or '0')}
