-- reconcile.lua raises a thread's transcript mark and version to what its
-- durable transcript says they were before Redis lost writes. It changes
-- neither the status nor updated_at, publishes nothing, and does not bump
-- the version otherwise: an activation holding the thread goes on unless
-- its version is passed.
--
-- KEYS[1] thread hash
-- ARGV[1] mark segments ("" = leave), ARGV[2] the mark's chain hash,
-- ARGV[3] minimum version ("0" = leave), ARGV[4] thread id
-- Returns {mark before, mark after, version before, version after};
-- refuses NOTFOUND <id>.

local cur = redis.call('HMGET', KEYS[1], 'status', 'version', 'transcript_segments')
if not cur[1] then return redis.error_reply('NOTFOUND ' .. ARGV[4]) end
local m0, v0 = tonumber(cur[3] or '0') or 0, tonumber(cur[2] or '0') or 0
local m1, v1 = m0, v0
if ARGV[1] ~= '' and tonumber(ARGV[1]) > m0 then
  m1 = tonumber(ARGV[1])
  redis.call('HSET', KEYS[1], 'transcript_segments', ARGV[1], 'transcript_chain_hash', ARGV[2])
end
if tonumber(ARGV[3]) > v0 then
  v1 = tonumber(ARGV[3])
  redis.call('HSET', KEYS[1], 'version', ARGV[3])
end
return {m0, m1, v0, v1}
