-- release_lease.lua drops a lease held by token (as finalize.lua does
-- with the end of a thread). KEYS[1] lease; ARGV[1] token. Returns 1, or
-- 0 when another token holds it.

if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
