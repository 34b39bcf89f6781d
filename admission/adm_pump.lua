-- adm_pump.lua sets the tenant's share (the balancer) or applies
-- overrides (spool tenant set), moves the key and ceiling waiters that
-- have room to the ready queue, and runs the grant loop. Once a UTC day
-- it trims the tenant's spend windows (trimspend).
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] the share ("": unchanged;
-- "<=N": a share above N is lowered to N, its time kept: a tenant turned
-- active since the pass that wrote it),
-- ARGV[6] overrides (JSON field → value, "" clears the field; "": none),
-- ARGV[7] "1": clear every override first, ARGV[8] the most grants to make
-- Returns {generation, retry at, then activation, record pairs of the
-- grants made}.
local K = adm.keys(KEYS, 1)

-- monthsback is the window n months before window m:YYYY-MM.
local function monthsback(m, n)
  local y, mo = string.match(m, '^m:(%d+)-(%d+)$')
  local i = tonumber(y) * 12 + tonumber(mo) - 1 - n
  return string.format('m:%04d-%02d', math.floor(i / 12), i % 12 + 1)
end

-- trimspend deletes the spend windows (adm:spend) older than 40 UTC days
-- and 13 months, which no call charges and no surface shows (they show
-- the day and month of now), unless one still holds an allowance (held
-- not 0: a call that began in a window settles in it, at its release or
-- reap, however late). It walks the hash with HSCAN, a step per call, and
-- marks the day done when the walk ends: bounded work per pump, one walk
-- a day.
local function trimspend(T)
  local today = T.wins[1].name
  local s = redis.call('HMGET', K.state, 'spend_trim', 'spend_cursor')
  if s[1] == today then return end
  local oldday, oldmonth = adm.windows(T.now - 40 * 86400000)[1].name, monthsback(T.wins[2].name, 13)
  local scan = redis.call('HSCAN', K.spend, s[2] or '0', 'COUNT', 64)
  local fields = scan[2]
  for i = 1, #fields, 2 do
    local w = string.match(fields[i], '^([dm]:[%d%-]+):')
    local old = w and ((string.sub(w, 1, 2) == 'd:' and w < oldday) or (string.sub(w, 1, 2) == 'm:' and w < oldmonth))
    if old and tonumber(redis.call('HGET', K.spend, w .. ':held') or '0') == 0 then
      redis.call('HDEL', K.spend, fields[i])
    end
  end
  if scan[1] == '0' then
    redis.call('HSET', K.state, 'spend_trim', today)
    redis.call('HDEL', K.state, 'spend_cursor')
  else
    redis.call('HSET', K.state, 'spend_cursor', scan[1])
  end
end

adm.sync(K, tonumber(ARGV[2]) or 0, ARGV[3])
if ARGV[7] == '1' then redis.call('DEL', K.over) end
if ARGV[6] ~= '' then
  for f, v in pairs(cjson.decode(ARGV[6])) do
    if v == '' then redis.call('HDEL', K.over, f) else redis.call('HSET', K.over, f, tostring(v)) end
  end
end
if ARGV[7] == '1' or ARGV[6] ~= '' then
  redis.call('HSET', K.state, 'ov', redis.call('HLEN', K.over) > 0 and '1' or '0')
end
local cap = string.match(ARGV[5], '^<=(%d+)$')
if cap then
  local cur = tonumber(redis.call('HGET', K.state, 'share') or '')
  if cur and cur > tonumber(cap) then redis.call('HSET', K.state, 'share', cap) end
elseif ARGV[5] ~= '' then
  local n, capped = string.match(ARGV[5], '^(%d+)(~?)$')
  redis.call('HSET', K.state, 'share', n, 'share_at', ARGV[1], 'share_capped', capped == '~' and '1' or '0')
end
local T = adm.open(K, tonumber(ARGV[1]), ARGV[4])
adm.reap(T)
adm.wakeall(T)
adm.wakeblocked(T)
adm.grants(T, tonumber(ARGV[8]))
trimspend(T)
return adm.reply(T, {})
