-- notify.lua tells the waiters of a finished chain, those of one shard.
--
-- KEYS per waiter i: KEYS[2i-1] its waits set, KEYS[2i] its thread hash;
-- then, when the chain's waiters set is in the same shard, that set (its
-- waiters leave it here; Go removes them afterwards otherwise). ARGV[1]
-- chain root, then the waiter ids.
-- Returns a flat list {waiter id, suspend seq, ...} of waiters to wake: those
-- whose last awaited chain this was (or any awaited chain, for a waiter
-- suspended with wake_any) and that are still waiting.

local out = {}
local n = math.floor(#KEYS / 2)
local set = (#KEYS % 2 == 1) and KEYS[#KEYS] or nil
for i = 1, n do
  local w = ARGV[1 + i]
  if set then redis.call('SREM', set, w) end
  if redis.call('SREM', KEYS[2*i - 1], ARGV[1]) == 1 then
    local h = redis.call('HMGET', KEYS[2*i], 'status', 'wake_any')
    local due = redis.call('SCARD', KEYS[2*i - 1]) == 0
    if h[2] == '1' then
      -- An any waiter: this chain wakes it, the next ones of the same
      -- suspension do not.
      due = true
      redis.call('HSET', KEYS[2*i], 'wake_any', 'woken')
    elseif h[2] == 'woken' then
      due = false
    end
    if due and h[1] == 'waiting' then
      table.insert(out, w)
      table.insert(out, redis.call('HGET', KEYS[2*i], 'suspend_seq'))
    end
  end
end
return out
