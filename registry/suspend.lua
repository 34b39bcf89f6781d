-- suspend.lua suspends a running thread until every target chain has
-- finished (mode all), or until any one has (mode any: a graph run's
-- sliding window of children, a wait node of mode any).
--
-- KEYS[1] waiter thread hash, KEYS[2] waits set of the waiter, KEYS[3] events channel,
-- then per target i: KEYS[3+2i-1] terminal thread hash, KEYS[3+2i] waiters set of its root
-- ARGV[1] expected version, ARGV[2] now, ARGV[3] waiter id, ARGV[4] mode
-- (all | any), then per target the root id
-- Returns {suspended 0|1, version}; refuses CONFLICT <actual>, CHAINMOVED
-- <root> (not MOVED: Redis Cluster clients read that as a slot redirect).
-- CHAINMOVED comes after writes: the waits set is emptied, and the waiter
-- may stay in the waiters sets of the targets before it (a waiter a
-- chain does not wait for is skipped when the chain finishes).
-- Mode any does not suspend when a target has finished already. The
-- waiter's wake_any (1 for any) tells NotifyWaiters when to wake it, and
-- wait_n (how many chains it waits on) tells StalledWaits that a wake-up
-- of an any waiter was lost.
--
-- ARGV[5+n..] (after the n target roots) are the roots of chains in other
-- shards (a wait across trees, Suspend), already found unfinished and
-- holding the waiter in their waiters sets: pending too.

local v = tonumber(redis.call('HGET', KEYS[1], 'version') or '0')
if v ~= tonumber(ARGV[1]) then return redis.error_reply('CONFLICT ' .. v) end
redis.call('DEL', KEYS[2])
local any = ARGV[4] == 'any'
local pending, done = 0, 0
local n = (#KEYS - 3) / 2
for i = 5 + n, #ARGV do
  pending = pending + 1
  redis.call('SADD', KEYS[2], ARGV[i])
end
for i = 1, n do
  local st = redis.call('HGET', KEYS[3 + 2*i - 1], 'status')
  local root = ARGV[4 + i]
  if st == 'continued' then
    redis.call('DEL', KEYS[2])
    return redis.error_reply('CHAINMOVED ' .. root)
  end
  if st ~= 'completed' and st ~= 'error' and st ~= 'cancelled' then
    pending = pending + 1
    redis.call('SADD', KEYS[2], root)
    redis.call('SADD', KEYS[3 + 2*i], ARGV[3])
  else
    done = done + 1
  end
end
if pending == 0 or (any and done > 0) then
  redis.call('DEL', KEYS[2])
  return {0, v}
end
v = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'status', 'waiting', 'suspend_seq', v, 'waiting_for', 'children', 'updated_at', ARGV[2],
  'wake_any', any and '1' or '0', 'wait_n', pending)
local st = 'waiting'
if redis.call('HGET', KEYS[1], 'pause_requested') == '1' then
  -- A pause asked while the thread ran applies at its suspension: it is
  -- paused, and waits for its children again when unpaused (pause.lua).
  local t = redis.call('TIME')
  st = 'paused'
  redis.call('HSET', KEYS[1], 'status', st, 'paused_from', 'children', 'paused_at', t[1] * 1000 + math.floor(t[2] / 1000))
end
redis.call('PUBLISH', KEYS[3], ARGV[3] .. ' ' .. st)
return {1, v}
