-- mark_stalled.lua records a stall on a thread that is not finished.
--
-- KEYS[1] thread hash
-- ARGV[1] the stall (JSON)
-- Returns 1 when recorded, 0 when the thread is gone or finished.

local st = redis.call('HGET', KEYS[1], 'status')
if not st or st == 'completed' or st == 'error' or st == 'cancelled' or st == 'continued' then return 0 end
redis.call('HSET', KEYS[1], 'stalled', ARGV[1])
return 1
