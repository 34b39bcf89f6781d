-- adm_where.lua reads where activations of one tenant stand, for `thread
-- show`, the API and the monitor's tenant page (every run it lists in one
-- call): nothing is written. Each activation costs a few reads, none of
-- them a scan (a rank in its queue); the caller bounds how many one call
-- takes (whereBatch).
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..n] activation ids
-- Returns {the tenant's admitted, its max_running (0: unset)}, then for
-- each activation, in ARGV's order, seven values: {state ('': no
-- record), what it waits for, the key it waits on, its place in line (1:
-- next; 0: not in line), requested at (ms), the key's slots held, the
-- key's max (0: unknown)}.
local K = adm.keys(KEYS, 1)
local admitted = tonumber(redis.call('HGET', K.state, 'admitted') or '0')
local mr = redis.call('HGET', K.over, 'max_running') or redis.call('HGET', K.conf, 'max_running') or '0'
local out = {admitted, tonumber(mr)}
for _, id in ipairs(ARGV) do
  local raw = redis.call('HGET', K.acts, id)
  if not raw then
    for _, v in ipairs({'', '', '', 0, 0, 0, 0}) do out[#out + 1] = v end
  else
    local r = adm.decode(raw)
    local pos, held, max = 0, 0, 0
    local key = r.wk or ''
    if r.st == 'ready' then
      pos = (redis.call('ZRANK', K.ready, id) or -1) + 1
    elseif r.st == 'key' then
      local member = key .. '|' .. string.format('%016x', adm.score(r)) .. '|' .. id
      pos = redis.call('ZLEXCOUNT', K.kq, '[' .. key .. '|', '[' .. member)
    end
    if key ~= '' then
      held = tonumber(redis.call('HGET', K.kheld, key) or '0')
      local rule = string.match(key, '^([^=]*)=') or key
      max = tonumber(redis.call('HGET', K.conf, 'rule:' .. rule) or '0')
    end
    for _, v in ipairs({r.st, r.why or '', key, pos, r.rq or 0, held, max}) do out[#out + 1] = v end
  end
end
return out
