-- webhook_claim.lua: a worker takes a due delivery for one attempt
-- (Runtime.ClaimWebhooks): its due score becomes the attempt's lease, so
-- no other worker takes it while the attempt runs, and a worker that dies
-- mid-attempt leaves it due again when the lease lapses.
--
-- KEYS[1]  the due index (WebhookDue)
-- KEYS[2]  the delivery's record
-- ARGV[1]  the delivery's id
-- ARGV[2]  now (unix ms)
-- ARGV[3]  the lease (ms)
--
-- Returns the record's fields (HGETALL) with attempts counting this one,
-- or false when it is not due (taken, delivered, or gone: then it leaves
-- the index).

local due = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not due or tonumber(due) > tonumber(ARGV[2]) then return false end
if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return false
end
redis.call('ZADD', KEYS[1], tonumber(ARGV[2]) + tonumber(ARGV[3]), ARGV[1])
redis.call('HINCRBY', KEYS[2], 'attempts', 1)
redis.call('HSET', KEYS[2], 'status', 'delivering')
return redis.call('HGETALL', KEYS[2])
