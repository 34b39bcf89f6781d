-- restore_messages.lua puts back a graph run's messages that Redis lost
-- and the blob store kept (each message is stored there before its send
-- returns): those its checkpoint has not recorded as taken.
--
-- KEYS[1] run hash, KEYS[2] messages list, KEYS[3] message ids hash
-- ARGV[1] the least message_seq the run may have (the highest seq the
-- store or the checkpoint knows: a send after this never reuses one),
-- ARGV[2..] messages (JSON with seq, name and id) not taken, by seq.
-- Returns how many were put back. A message the list holds is left as
-- it is; the list stays in seq order.

if redis.call('EXISTS', KEYS[1]) == 0 then return redis.error_reply('NOTFOUND') end
local have = {}
local kept = redis.call('LRANGE', KEYS[2], 0, -1)
for _, raw in ipairs(kept) do
  local ok, m = pcall(cjson.decode, raw)
  if ok then have[tonumber(m.seq)] = true end
end
local n = 0
for i = 2, #ARGV do
  local m = cjson.decode(ARGV[i])
  local seq = tonumber(m.seq)
  if not have[seq] then
    table.insert(kept, ARGV[i])
    have[seq] = true
    n = n + 1
  end
  if m.id and m.id ~= '' and redis.call('HEXISTS', KEYS[3], m.id) == 0 then
    redis.call('HSET', KEYS[3], m.id, seq)
  end
end
local cur = tonumber(redis.call('HGET', KEYS[1], 'message_seq') or '0')
if cur < tonumber(ARGV[1]) then redis.call('HSET', KEYS[1], 'message_seq', ARGV[1]) end
if n > 0 then
  local function seqof(raw) return tonumber(cjson.decode(raw).seq) end
  table.sort(kept, function(a, b) return seqof(a) < seqof(b) end)
  redis.call('DEL', KEYS[2])
  redis.call('RPUSH', KEYS[2], unpack(kept))
end
return n
