-- block.lua makes every rule refuse admissions until ARGV[1] (ms), unless
-- it already waits longer.
--
-- KEYS: the rules' blocked-until keys; ARGV[1] until (ms), ARGV[2] now
-- (ms). Returns 1.

local until_ms = tonumber(ARGV[1])
for i = 1, #KEYS do
  local cur = tonumber(redis.call('GET', KEYS[i]) or '0')
  if until_ms > cur then redis.call('SET', KEYS[i], until_ms, 'PX', math.max(1, until_ms - tonumber(ARGV[2]))) end
end
return 1
