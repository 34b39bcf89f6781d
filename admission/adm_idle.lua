-- adm_idle.lua drops a tenant's active mark when it has nothing admitted
-- and nothing waiting (the balancer takes it off the active tenants).
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- Returns 1 when it dropped the mark, 0 when the tenant has work.
local state, ready, kwait, bq = KEYS[3], KEYS[6], KEYS[8], KEYS[10]
if tonumber(redis.call('HGET', state, 'admitted') or '0') > 0 or redis.call('ZCARD', ready) > 0
  or redis.call('HLEN', kwait) > 0 or redis.call('ZCARD', bq) > 0 then
  return 0
end
redis.call('HDEL', state, 'active')
return 1
