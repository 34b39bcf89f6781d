-- status.lua reads budgets' state and counters (it writes nothing).
--
-- KEYS as admit.lua's; ARGV[1] now (ms), ARGV[2] the oldest time of
-- asking of a waiter still registered (waiterAt).
-- Returns per budget {req TAT, in TAT, out TAT, leases held, waiters,
-- blocked until, {stats field, value, ...}}, the TATs and blocked-until
-- as stored ("" when unset).
--
-- It runs after waitSpanLua, which sets span (waitSpan).

local now, cutoff = tonumber(ARGV[1]), tonumber(ARGV[2])
local n = (#KEYS - 1) / 7
local out = {}
for i = 1, n do
  local k = 7 * (i - 1)
  local waiters = 0
  local w = redis.call('ZRANGE', KEYS[k+6], 0, 999, 'WITHSCORES')
  for j = 2, #w, 2 do
    local sc = tonumber(w[j])
    if sc < 1e6 * span + span and sc % span >= cutoff then waiters = waiters + 1 end
  end
  out[i] = {redis.call('GET', KEYS[k+1]) or '', redis.call('GET', KEYS[k+2]) or '', redis.call('GET', KEYS[k+3]) or '',
    redis.call('ZCOUNT', KEYS[k+4], '(' .. now, '+inf'), waiters, redis.call('GET', KEYS[k+5]) or '',
    redis.call('HGETALL', KEYS[k+7])}
end
return out
