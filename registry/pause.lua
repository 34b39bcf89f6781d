-- pause.lua asks a thread to pause (`spool thread pause`).
--
-- KEYS[1] thread hash, KEYS[2] events channel
-- ARGV[1] thread id, ARGV[2] now (RFC3339Nano), ARGV[3] now (unix ms)
-- The thread gets pause_requested. One that waits (on children, a
-- decision, a message, a timer, a retry) holds no activation: it is
-- paused here, at once (status paused, paused_from = what it waited
-- for, which its unpause waits for again). One parked for admission
-- (adm_act) or not started (created) pauses at the first boundary of
-- the activation that claims it, as a running one does at its next:
-- that activation holds the slot it is to give back.
-- Returns {status now, 1 when paused here}; refuses NOTFOUND <id>.

local h = redis.call('HMGET', KEYS[1], 'status', 'waiting_for', 'adm_act', 'version')
local st = h[1]
if not st then return redis.error_reply('NOTFOUND ' .. ARGV[1]) end
if st == 'completed' or st == 'error' or st == 'cancelled' or st == 'continued' then return {st, 0} end
redis.call('HSET', KEYS[1], 'pause_requested', '1')
if st ~= 'waiting' or (h[3] and h[3] ~= '') then
  -- "<id> pause" (no status: waiters ignore it) ends the hold of a graph
  -- run's activation on its children, which then suspends, paused.
  redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' pause')
  return {st, 0}
end
local v = (tonumber(h[4]) or 0) + 1
redis.call('HSET', KEYS[1], 'status', 'paused', 'paused_from', h[2] or '', 'paused_at', ARGV[3],
  'version', v, 'updated_at', ARGV[2])
redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' paused')
return {'paused', 1}
