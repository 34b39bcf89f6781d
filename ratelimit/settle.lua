-- settle.lua corrects token reservations to actual usage, releases the
-- concurrency lease and counts the call settled and its tokens used.
--
-- KEYS as admit.lua's; ARGV[1] now (ms), ARGV[2] holder, ARGV[3] stats
-- TTL (ms), then per rule: itpm, otpm, input reserved, input used, output
-- reserved, output used. Returns 1.

local now, holder, sttl = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local n = (#KEYS - 1) / 7
local function adjust(key, per_min, delta)
  if per_min <= 0 or delta == 0 then return end
  local tat = tonumber(redis.call('GET', key) or '0')
  if tat == 0 then return end
  tat = tat + delta * 60000 / per_min
  if tat <= now then redis.call('DEL', key); return end
  redis.call('SET', key, tat, 'PX', math.ceil(tat - now) + 1000)
end
for i = 1, n do
  local k = 7 * (i - 1)
  local a = 3 + 6 * (i - 1)
  local itpm, otpm = tonumber(ARGV[a+1]), tonumber(ARGV[a+2])
  adjust(KEYS[k+2], itpm, tonumber(ARGV[a+4]) - tonumber(ARGV[a+3]))
  adjust(KEYS[k+3], otpm, tonumber(ARGV[a+6]) - tonumber(ARGV[a+5]))
  redis.call('ZREM', KEYS[k+4], holder)
  redis.call('HINCRBY', KEYS[k+7], 'settled', 1)
  redis.call('HINCRBY', KEYS[k+7], 'input_used', ARGV[a+4])
  redis.call('HINCRBY', KEYS[k+7], 'output_used', ARGV[a+6])
  redis.call('PEXPIRE', KEYS[k+7], sttl)
end
return 1
