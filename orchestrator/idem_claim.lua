-- idem_claim.lua: the claim of an idempotency key of a tenant, in the
-- tenant's slot (Orchestrator.Start with StartRequest.IdempotencyKey).
-- The first start of a key records its request's fingerprint and the run
-- id planned for it; a start of the same key within the retention gets
-- that run id back (and starts the run itself when nobody registered it:
-- registration is create-once), or is refused when it is another request.
-- A record older than the retention is the key's no longer: a new start
-- replaces it (the record also expires in Redis, which only tidies).
--
-- KEYS[1]  the key's record (a hash: fingerprint, run_id, created_at ms)
-- ARGV[1]  the request's fingerprint (hex SHA-256)
-- ARGV[2]  the run id planned for it
-- ARGV[3]  now (unix ms)
-- ARGV[4]  the retention (ms)
--
-- Returns {run id, 1 when this call recorded it (the key's first start)
-- else 0}. Refuses IDEMREUSED <run id>: the key belongs to another request
-- of the tenant (nothing is written).

local now, retention = tonumber(ARGV[3]), tonumber(ARGV[4])
local cur = redis.call('HMGET', KEYS[1], 'fingerprint', 'run_id', 'created_at')
if cur[1] and (tonumber(cur[3]) or 0) + retention > now then
  if cur[1] ~= ARGV[1] then return redis.error_reply('IDEMREUSED ' .. cur[2]) end
  return {cur[2], 0}
end
redis.call('HSET', KEYS[1], 'fingerprint', ARGV[1], 'run_id', ARGV[2], 'created_at', ARGV[3])
redis.call('PEXPIRE', KEYS[1], retention)
return {ARGV[2], 1}
