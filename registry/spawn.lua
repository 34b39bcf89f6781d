-- spawn.lua checks and increments a parent's spawn counter.
--
-- KEYS[1] spawns counter of the parent
-- ARGV[1] limit (a negative limit is unlimited)
-- Returns the new count; refuses SPAWNLIMIT <count> when the limit is
-- reached (the counter is unchanged).

local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local lim = tonumber(ARGV[1])
if lim >= 0 and c >= lim then return redis.error_reply('SPAWNLIMIT ' .. c) end
return redis.call('INCR', KEYS[1])
