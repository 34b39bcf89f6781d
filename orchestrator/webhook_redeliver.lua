-- webhook_redeliver.lua: a delivery is asked again (spool webhook
-- redeliver): due now, its attempts counted afresh, the same event id.
--
-- KEYS[1]  the due index (WebhookDue)
-- KEYS[2]  the delivery's record
-- ARGV[1]  the delivery's id
-- ARGV[2]  now (unix ms)
--
-- Returns 1, or 0 when there is no such delivery.

if redis.call('EXISTS', KEYS[2]) == 0 then return 0 end
redis.call('HSET', KEYS[2], 'status', 'pending', 'attempts', 0, 'next_at', ARGV[2])
redis.call('HINCRBY', KEYS[2], 'redeliveries', 1)
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
return 1
