-- heartbeat.lua renews a lease held by token.
--
-- KEYS[1] lease key; ARGV[1] token, ARGV[2] ttl ms. Returns 1, or 0 when lost.

if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
