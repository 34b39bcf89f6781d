-- admit.lua admits a call against every rule, or none.
--
-- KEYS per rule i (0-based): 7i+1 req TAT, 7i+2 in TAT, 7i+3 out TAT,
-- 7i+4 concurrency zset, 7i+5 blocked-until, 7i+6 waiters zset, 7i+7
-- stats hash; the last KEYS the index of budgets (id → key fingerprint)
-- ARGV[1] now (ms), ARGV[2] holder, ARGV[3] lease TTL (ms), ARGV[4] the
-- waiter's score (waiterScore), ARGV[5] waiter TTL (ms), ARGV[6] stats
-- TTL (ms), then per rule 9 values: rpm, burst, itpm, otpm, concurrent,
-- input cost, output cost, budget id, key fingerprint
-- Returns {1} when admitted (every rule charged, the lease taken, the
-- waiter dropped, admitted and tokens reserved counted); {0, wait ms,
-- rule index (1-based), kind} when not (nothing charged; the caller
-- registered as a waiter, the refusal counted on the rule that refused).
-- Not admitted is an answer, not a refusal (package reply): the script
-- wrote the waiter.
--
-- It runs after waitSpanLua, which sets span (waitSpan).

local now, holder, ttl, score, wttl, sttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local n = (#KEYS - 1) / 7
local plan = {}
local cutoff = (score % span) - math.floor(wttl / 1000)
local function refuse(k, i, wait, kind)
  redis.call('ZADD', KEYS[k+6], score, holder)
  redis.call('PEXPIRE', KEYS[k+6], wttl)
  redis.call('HINCRBY', KEYS[k+7], 'throttled', 1)
  redis.call('HINCRBY', KEYS[k+7], 'throttled_' .. kind, 1)
  redis.call('PEXPIRE', KEYS[k+7], sttl)
  return {0, wait, i, kind}
end
local function gcra(key, per_min, burst, cost)
  if per_min <= 0 or cost <= 0 then return true, 0, nil end
  local t = 60000 / per_min
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat < now then tat = now end
  local new = tat + cost * t
  local allow_at = new - burst * t
  if allow_at > now then return false, allow_at - now, nil end
  return true, 0, new
end
for i = 1, n do
  local k = 7 * (i - 1)
  local a = 6 + 9 * (i - 1)
  local rpm, burst, itpm, otpm, conc = tonumber(ARGV[a+1]), tonumber(ARGV[a+2]), tonumber(ARGV[a+3]), tonumber(ARGV[a+4]), tonumber(ARGV[a+5])
  local cin, cout = tonumber(ARGV[a+6]), tonumber(ARGV[a+7])
  local blocked = tonumber(redis.call('GET', KEYS[k+5]) or '0')
  if blocked > now then return refuse(k, i, blocked - now, 'block') end
  -- callers of a higher priority that wait go first; the first waiter
  -- is dropped while it has not asked for the waiter TTL (a few a call)
  local best
  for _ = 1, 16 do
    best = redis.call('ZRANGE', KEYS[k+6], 0, 0, 'WITHSCORES')
    if not best[1] or tonumber(best[2]) % span >= cutoff then break end
    redis.call('ZREM', KEYS[k+6], best[1])
    best = {}
  end
  if best[1] and best[1] ~= holder and math.floor(tonumber(best[2]) / span) < math.floor(score / span) then
    return refuse(k, i, 250, 'priority')
  end
  local ok, wait, r1 = gcra(KEYS[k+1], rpm, burst, 1)
  if not ok then return refuse(k, i, wait, 'req') end
  local ok2, wait2, r2 = gcra(KEYS[k+2], itpm, itpm, math.min(cin, itpm))
  if not ok2 then return refuse(k, i, wait2, 'in') end
  local ok3, wait3, r3 = gcra(KEYS[k+3], otpm, otpm, math.min(cout, otpm))
  if not ok3 then return refuse(k, i, wait3, 'out') end
  if conc > 0 then
    redis.call('ZREMRANGEBYSCORE', KEYS[k+4], '-inf', now)
    if not redis.call('ZSCORE', KEYS[k+4], holder) and redis.call('ZCARD', KEYS[k+4]) >= conc then
      return refuse(k, i, -1, 'conc')
    end
  end
  plan[i] = {r1, r2, r3, conc, cin, cout, ARGV[a+8], ARGV[a+9]}
end
for i = 1, n do
  local k = 7 * (i - 1)
  local p = plan[i]
  if p[1] then redis.call('SET', KEYS[k+1], p[1], 'PX', math.ceil(p[1] - now) + 1000) end
  if p[2] then redis.call('SET', KEYS[k+2], p[2], 'PX', math.ceil(p[2] - now) + 1000) end
  if p[3] then redis.call('SET', KEYS[k+3], p[3], 'PX', math.ceil(p[3] - now) + 1000) end
  if p[4] > 0 then
    redis.call('ZADD', KEYS[k+4], now + ttl, holder)
    redis.call('PEXPIRE', KEYS[k+4], ttl + 60000)
  end
  redis.call('ZREM', KEYS[k+6], holder)
  redis.call('HINCRBY', KEYS[k+7], 'admitted', 1)
  redis.call('HINCRBY', KEYS[k+7], 'input_reserved', p[5])
  redis.call('HINCRBY', KEYS[k+7], 'output_reserved', p[6])
  redis.call('PEXPIRE', KEYS[k+7], sttl)
  redis.call('HSET', KEYS[#KEYS], p[7], p[8])
end
redis.call('PEXPIRE', KEYS[#KEYS], sttl)
return {1}
