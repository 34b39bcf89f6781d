-- renew.lua extends the holder's concurrency leases.
--
-- KEYS: the rules' concurrency zsets; ARGV[1] expiry (ms), ARGV[2] holder.

for i = 1, #KEYS do redis.call('ZADD', KEYS[i], 'XX', ARGV[1], ARGV[2]) end
return 1
