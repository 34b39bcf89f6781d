-- adm_pump.lua sets the tenant's share (the balancer) or applies
-- overrides (spool tenant set), moves the key and ceiling waiters that
-- have room to the ready queue, and runs the grant loop.
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] the share ("": unchanged),
-- ARGV[6] overrides (JSON field → value, "" clears the field; "": none),
-- ARGV[7] "1": clear every override first, ARGV[8] the most grants to make
-- Returns {generation, retry at, then activation, record pairs of the
-- grants made}.
local K = adm.keys(KEYS, 1)
adm.sync(K, tonumber(ARGV[2]) or 0, ARGV[3])
if ARGV[7] == '1' then redis.call('DEL', K.over) end
if ARGV[6] ~= '' then
  for f, v in pairs(cjson.decode(ARGV[6])) do
    if v == '' then redis.call('HDEL', K.over, f) else redis.call('HSET', K.over, f, tostring(v)) end
  end
end
if ARGV[5] ~= '' then redis.call('HSET', K.state, 'share', ARGV[5], 'share_at', ARGV[1]) end
local T = adm.open(K, tonumber(ARGV[1]), ARGV[4])
adm.reap(T)
adm.wakeall(T)
adm.wakeblocked(T)
adm.grants(T, tonumber(ARGV[8]))
return adm.reply(T, {})
