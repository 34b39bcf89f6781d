-- adm_where.lua reads where an activation stands, for `thread show` and
-- the API: nothing is written.
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1] activation id
-- Returns {} when it has no record, else {state, what it waits for, the
-- key it waits on, its place in line (1: next; 0: not in line), requested
-- at (ms), the key's slots held, the key's max (0: unknown), the tenant's
-- admitted, its max_running (0: unset)}.
local K = adm.keys(KEYS, 1)
local raw = redis.call('HGET', K.acts, ARGV[1])
if not raw then return {} end
local r = adm.decode(raw)
local s = redis.call('HMGET', K.state, 'admitted')
local mr = redis.call('HGET', K.over, 'max_running') or redis.call('HGET', K.conf, 'max_running') or '0'
local pos, held, max = 0, 0, 0
local key = r.wk or ''
if r.st == 'ready' then
  pos = redis.call('ZRANK', K.ready, ARGV[1]) + 1
elseif r.st == 'key' then
  local member = key .. '|' .. string.format('%016x', adm.score(r)) .. '|' .. ARGV[1]
  pos = redis.call('ZLEXCOUNT', K.kq, '[' .. key .. '|', '[' .. member)
end
if key ~= '' then
  held = tonumber(redis.call('HGET', K.kheld, key) or '0')
  local rule = string.match(key, '^([^=]*)=') or key
  max = tonumber(redis.call('HGET', K.conf, 'rule:' .. rule) or '0')
end
return {r.st, r.why or '', r.wk or '', pos, r.rq or 0, held, max, tonumber(s[1] or '0'), tonumber(mr)}
