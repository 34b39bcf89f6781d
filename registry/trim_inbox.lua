-- trim_inbox.lua drops the inbox messages whose seq is at most ARGV[1].
--
-- KEYS[1] inbox list; ARGV[1] seq. Returns how many were dropped.

local n = 0
while true do
  local head = redis.call('LINDEX', KEYS[1], 0)
  if not head then break end
  local seq = tonumber(string.match(head, '^{"seq":(%d+),'))
  if not seq or seq > tonumber(ARGV[1]) then break end
  redis.call('LPOP', KEYS[1])
  n = n + 1
end
return n
