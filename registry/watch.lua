-- watch.lua joins a waiter to a chain of another shard's tree and reads
-- its terminal thread (Suspend).
--
-- KEYS[1] the chain's terminal thread hash, KEYS[2] the chain root's
-- waiters set; ARGV[1] waiter id, ARGV[2] chain root.
-- Returns 1 (pending: the waiter is in the set) or 0 (finished); refuses
-- CHAINMOVED <root> as suspend.lua does.

local st = redis.call('HGET', KEYS[1], 'status')
if st == 'continued' then return redis.error_reply('CHAINMOVED ' .. ARGV[2]) end
if st == 'completed' or st == 'error' or st == 'cancelled' then return 0 end
redis.call('SADD', KEYS[2], ARGV[1])
return 1
