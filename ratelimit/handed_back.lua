-- handed_back.lua counts a thread handed back to wait for a budget.
--
-- KEYS[1] the budget's stats hash; ARGV[1] stats TTL (ms). Returns the
-- new count.

local n = redis.call('HINCRBY', KEYS[1], 'waiting', 1)
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return n
