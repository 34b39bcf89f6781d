-- webhook_make.lua: a delivery of a run event to one endpoint is made
-- once (Runtime.RelayWebhooks): a second making of it (a relay that died
-- after making it and before dropping the outbox entry, two relays at a
-- handover) finds it and changes nothing.
--
-- KEYS[1]  the delivery's record (keyspace WebhookDelivery)
-- KEYS[2]  the due index (WebhookDue)
-- KEYS[3]  the index of every delivery (WebhookAll)
-- KEYS[4]  the endpoints' counters (WebhookStats)
-- ARGV[1]  the delivery's id
-- ARGV[2]  now (unix ms)
-- ARGV[3]  how long a delivery is kept (seconds)
-- ARGV[4..] its fields (pairs; its endpoint among them, whose counter
--           of deliveries made it raises)
--
-- Returns 1 when it was made, 0 when it was there already.

if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local now = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
redis.call('HSET', KEYS[1], 'status', 'pending', 'attempts', 0, 'next_at', now)
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('ZADD', KEYS[2], now, ARGV[1])
redis.call('ZADD', KEYS[3], now, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[3], '-inf', '(' .. (now - tonumber(ARGV[3]) * 1000))
redis.call('HINCRBY', KEYS[4], redis.call('HGET', KEYS[1], 'endpoint') .. '|made', 1)
return 1
