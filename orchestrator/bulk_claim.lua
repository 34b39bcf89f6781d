-- bulk_claim.lua: a process takes the running of a bulk operation
-- (Orchestrator.RunBulk): when nobody holds it, when its holder's lease
-- lapsed (the process running it died or stalled), or when this process
-- holds it already.
--
-- KEYS[1]  the operation's record (keyspace Bulk)
-- ARGV[1]  the claiming process's token
-- ARGV[2]  now (unix ms)
-- ARGV[3]  the lease (ms)
--
-- Returns {1, next, previous owner} when the caller holds it now (next:
-- the index of the first run not acted on; previous owner: "" for a
-- first claim), {0, status} when it is finished or held by another
-- process, {-1} when there is no such operation.

local cur = redis.call('HMGET', KEYS[1], 'status', 'owner', 'lease_until', 'next')
if not cur[1] then return {-1} end
if cur[1] ~= 'running' then return {0, cur[1]} end
local now = tonumber(ARGV[2])
local owner = cur[2] or ''
if owner ~= '' and owner ~= ARGV[1] and (tonumber(cur[3]) or 0) > now then
  return {0, cur[1]}
end
redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'lease_until', now + tonumber(ARGV[3]))
if owner ~= ARGV[1] and owner ~= '' then
  redis.call('HINCRBY', KEYS[1], 'adoptions', 1)
end
return {1, tonumber(cur[4]) or 0, owner}
