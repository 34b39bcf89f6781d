-- acquire_lock.lua takes a lock that is free or already the caller's: a
-- holder that finds its own token there lost its release (Redis failed
-- over without its last writes, or the release never reached it) and
-- takes the lock again instead of waiting out its TTL.
--
-- KEYS[1] lock key
-- ARGV[1] holder token, ARGV[2] TTL (ms)
-- Returns 1 when the caller holds the lock now, 0 when another does.

local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
