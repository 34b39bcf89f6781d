-- claim.lua starts an activation.
--
-- KEYS[1] thread hash, KEYS[2] lease key, KEYS[3] active set, KEYS[4] events channel
-- ARGV[1] reason (start|requeue|wake|timeout|recover|retry), ARGV[2] seq, ARGV[3] token,
-- ARGV[4] lease ttl ms, ARGV[5] now (RFC3339Nano), ARGV[6] task id,
-- ARGV[7] the activation's admission id (absent or "": admission off)
-- Returns {new version, activation number, HGETALL of the thread, the
-- admission id of the activation before it ("": none), what that one
-- spent (nano; -1: unknown)}; refuses NOTFOUND, NOTCLAIMABLE <status>
-- <reason>.
--
-- An admitted activation notes its admission id and the thread's spend
-- at its claim (allow_act, allow_from): at the next admitted claim the
-- difference is what the one before spent, which settles its allowance
-- if its lease was reaped. allow_prev keeps the last eight of these,
-- newest first ("<act>=<nano>;..."), for housekeeping when the claim's
-- own activation dies too and its release never settles the one before.
--
-- A thread admission parked (park.lua: waiting, adm_act) is claimable by
-- the parked activation: "<thread>" for a start, "<thread>@<reason>-<seq>"
-- for any other (whatever its task's id, and for a recovery whatever the
-- thread's version now); a recovery parked after its activation yielded
-- (park.lua: running, no lease) is claimed as one.

local h = redis.call('HMGET', KEYS[1], 'status', 'active_task', 'suspend_seq', 'version', 'started_at', 'thread_id', 'activation', 'adm_act')
local st = h[1]
if not st then return redis.error_reply('NOTFOUND') end
local reason, seq = ARGV[1], tonumber(ARGV[2])
-- redelivered: asynq runs this very task again and its lease has lapsed.
local function redelivered()
  return st == 'running' and h[2] == ARGV[6] and redis.call('EXISTS', KEYS[2]) == 0
end
local ok = false
local act = h[6]
if reason ~= 'start' then act = h[6] .. '@' .. reason .. '-' .. ARGV[2] end
local parked = st == 'waiting' and h[8] == act
if reason == 'start' or reason == 'requeue' then
  ok = st == 'created' or parked or redelivered()
elseif reason == 'wake' or reason == 'timeout' then
  ok = (st == 'waiting' and tonumber(h[3] or '-1') == seq) or redelivered()
elseif reason == 'recover' then
  -- A parked recovery is named by adm_act, which fences it: the version
  -- may have moved past its seq since it parked (reconciliation raises a
  -- waiting thread's version after Redis lost commits), and it must
  -- still be claimable, or it waits for good.
  ok = ((st == 'running' and tonumber(h[4] or '0') == seq) or parked) and redis.call('EXISTS', KEYS[2]) == 0
end
if not ok then return redis.error_reply('NOTCLAIMABLE ' .. st .. ' ' .. reason) end
local v, n = (tonumber(h[4]) or 0) + 1, (tonumber(h[7]) or 0) + 1
local set = {'version', v, 'activation', n, 'status', 'running', 'active_task', ARGV[6], 'updated_at', ARGV[5], 'waiting_for', ''}
if not h[5] or h[5] == '' then
  set[#set + 1] = 'started_at'
  set[#set + 1] = ARGV[5]
end
local prev, used = '', -1
if ARGV[7] and ARGV[7] ~= '' then
  local a = redis.call('HMGET', KEYS[1], 'allow_act', 'allow_from', 'cost', 'allow_prev')
  local spend = 0
  if a[3] and a[3] ~= '' then
    local okc, c = pcall(cjson.decode, a[3])
    if okc and type(c) == 'table' and tonumber(c.spend) then spend = math.floor(tonumber(c.spend) * 1e9 + 0.5) end
  end
  if a[1] then
    prev, used = a[1], math.max(spend - (tonumber(a[2]) or spend), 0)
    local list, n = prev .. '=' .. used, 1
    for e in string.gmatch(a[4] or '', '[^;]+') do
      if n >= 8 then break end
      list, n = list .. ';' .. e, n + 1
    end
    for _, v in ipairs({'allow_prev', list}) do set[#set + 1] = v end
  end
  for _, v in ipairs({'allow_act', ARGV[7], 'allow_from', spend}) do set[#set + 1] = v end
end
redis.call('HSET', KEYS[1], unpack(set))
if h[8] then redis.call('HDEL', KEYS[1], 'adm_act', 'adm_tenant') end
redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[4])
redis.call('SADD', KEYS[3], h[6])
if st ~= 'running' then redis.call('PUBLISH', KEYS[4], h[6] .. ' running') end
return {v, n, redis.call('HGETALL', KEYS[1]), prev, used}
