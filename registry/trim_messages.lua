-- trim_messages.lua drops a graph run's kept messages of a name up to a
-- seq: those its checkpoint records as taken.
--
-- KEYS[1] messages list; ARGV[1] name, ARGV[2] seq. Returns how many
-- were dropped.

local n = 0
local upto = tonumber(ARGV[2])
for _, raw in ipairs(redis.call('LRANGE', KEYS[1], 0, -1)) do
  local ok, m = pcall(cjson.decode, raw)
  if ok and m.name == ARGV[1] and tonumber(m.seq) <= upto then
    n = n + redis.call('LREM', KEYS[1], 1, raw)
  end
end
return n
