-- release_lock.lua deletes a lock only if it is still held by the caller.
--
-- KEYS[1] lock key
-- ARGV[1] holder token
-- Returns 1 when deleted, 0 when the lock is gone or held by another.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
