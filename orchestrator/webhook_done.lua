-- webhook_done.lua: the outcome of one attempt of a delivery
-- (Runtime.WebhookAttempted).
--
-- KEYS[1]  the due index (WebhookDue)
-- KEYS[2]  the delivery's record
-- KEYS[3]  the endpoints' counters (WebhookStats): the attempt is
--          counted under <endpoint>|<outcome>
-- ARGV[1]  the delivery's id
-- ARGV[2]  the outcome: delivered, retrying (due again at ARGV[3]) or
--          failed (no more attempts)
-- ARGV[3]  the next attempt (unix ms; retrying)
-- ARGV[4]  the answer's status code (0: none)
-- ARGV[5]  the error ("" when delivered)
-- ARGV[6]  now (RFC3339Nano)
--
-- A delivery asked again meanwhile (redeliver: status pending) stays
-- due as it was asked. Returns 1, or 0 when the record is gone.

if redis.call('EXISTS', KEYS[2]) == 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 0
end
if redis.call('HGET', KEYS[2], 'status') == 'pending' then return 1 end
redis.call('HINCRBY', KEYS[3], (redis.call('HGET', KEYS[2], 'endpoint') or '') .. '|' .. ARGV[2], 1)
redis.call('HSET', KEYS[2], 'status', ARGV[2], 'last_code', ARGV[4], 'last_error', ARGV[5], 'last_attempt_at', ARGV[6])
if ARGV[2] == 'retrying' then
  redis.call('HSET', KEYS[2], 'next_at', ARGV[3])
  redis.call('ZADD', KEYS[1], ARGV[3], ARGV[1])
else
  if ARGV[2] == 'delivered' then redis.call('HSET', KEYS[2], 'delivered_at', ARGV[6]) end
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return 1
