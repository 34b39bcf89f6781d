-- webhook_hold.lua: one worker at a time relays the outboxes
-- (Runtime.HoldWebhookRelay): it takes the relay when nobody holds it,
-- or renews it when it holds it.
--
-- KEYS[1]  the relay's lock (keyspace Lock)
-- ARGV[1]  the worker's token
-- ARGV[2]  the lease (ms)
--
-- Returns 1 when the caller holds it now, else 0.

local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
