-- unspawn.lua decrements a parent's spawn counter, not below zero.
--
-- KEYS[1] spawns counter of the parent
-- Returns the new count.

local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c <= 0 then return 0 end
return redis.call('DECR', KEYS[1])
