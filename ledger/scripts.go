package ledger

import "github.com/spool-run/spool/internal/luabatch"

// Every script but register takes one entry and its ancestors' entries:
//
//	KEYS[1]       the entry the operation is about
//	KEYS[2..n]    its ancestors' entries, parent first, up to the root's
//	ARGV[1..n]    the ledger ids of KEYS[1..n], in the same order
//	ARGV[n+1..]   the operation's own arguments
//
// and checks that the ids form the entry's path as the entries record it
// (each one's parent_id is the next id, the last is a root), so a caller
// can never charge or release along a path that is not the tree's.
//
// Every script returns an array whose first element is a status string:
// "OK" (or a charge's "ok"/"over") with the entry's fields after it, in
// entryFields order, amounts as integers; or an error code the Go side
// maps to a sentinel. Amounts go to redis.call as Lua numbers, which Redis
// renders with %.17g: exact integers below 2^53, far above MaxAmount in
// nano-USD. Each entry is read with one HMGET and written with one HSET.

const luaCommon = `
local function num(v) return tonumber(v) or 0 end

-- level reads the path entry KEYS[i] (ledger id ARGV[i]); nil when it
-- does not exist.
local function level(i)
  local e = redis.call('HMGET', KEYS[i], 'parent_id', 'max', 'reserved', 'actual', 'status', 'g')
  if not e[5] then return nil end
  return {parent = e[1] or '', max = num(e[2]), res = num(e[3]), act = num(e[4]),
    status = e[5], g = e[6] == '1', id = ARGV[i], key = KEYS[i]}
end

-- ancestors reads KEYS[2..n] into lv[2..n] and checks that lv[1..n] is
-- one path up to a root. Returns nil and an error reply otherwise.
local function ancestors(lv)
  for i = 2, #KEYS do
    local l = level(i)
    if not l then
      if i == 2 then return nil, {'NOPARENT', ARGV[2]} end
      return nil, {'PATH', 'ancestor ' .. ARGV[i] .. ' has no ledger entry'}
    end
    lv[i] = l
  end
  for i = 1, #KEYS do
    local want = ARGV[i + 1]
    if i == #KEYS then want = '' end
    if lv[i] and lv[i].parent ~= want then
      if want == '' then
        return nil, {'PATH', 'the path stops at ' .. ARGV[i] .. ', whose parent is ' .. lv[i].parent}
      end
      return nil, {'PATH', 'the path gives ' .. ARGV[i] .. ' the parent ' .. want .. ', the ledger ' .. lv[i].parent}
    end
  end
  return lv
end

-- region is the last level of the region that starts at level from: the
-- first level up from it that is an active guaranteed entry (whose own
-- reservation covers everything above), else the root.
local function region(lv, from)
  for j = from, #KEYS do
    if lv[j].g and lv[j].status == 'active' then return j end
  end
  return #KEYS
end

-- room is what a level can still take: max - actual - reserved, not below 0.
local function room(l)
  local r = l.max - l.res - l.act
  if r < 0 then r = 0 end
  return r
end

-- smallest is the smallest room over lv[from..to] and the (lowest) level
-- that has it.
local function smallest(lv, from, to)
  local best, at = nil, from
  for j = from, to do
    local r = room(lv[j])
    if best == nil or r < best then best, at = r, j end
  end
  return best or 0, at
end

-- limiter is the reply tail naming a level: id, max, actual, reserved.
local function limiter(l)
  return l.id, l.max, l.act, l.res
end
`

// registerScript creates a root entry.
//
// KEYS[1] ledger entry of the root
// ARGV[1] max (nano-USD)
// Returns {"OK", fields...} (also when it exists with the same max and no
// parent), {"EXISTS", fields...} otherwise.
var registerScript = luabatch.NewScript("ledger_register", luaCommon+`
local e = redis.call('HMGET', KEYS[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
if e[7] then
  local code = 'EXISTS'
  if (e[1] or '') == '' and e[2] == ARGV[1] then code = 'OK' end
  return {code, e[1], num(e[2]), num(e[3]), num(e[4]), num(e[5]), num(e[6]), e[7], e[8] or '0'}
end
redis.call('HSET', KEYS[1], 'parent_id', '', 'max', ARGV[1], 'reserved', 0, 'actual', 0,
  'own', 0, 'overrun', 0, 'status', 'active', 'g', 0)
return {'OK', '', num(ARGV[1]), 0, 0, 0, 0, 'active', '0'}
`)

// roomScript reads what an entry's subtree may still spend: the smallest
// room over the region that starts at KEYS[1] (read only).
//
// KEYS, ARGV[1..n] the entry and its ancestors (see above)
// Returns {"OK", status of KEYS[1], room, limiter id, its max, actual,
// reserved}; {"NOPARENT", id} when KEYS[1] does not exist; {"PATH", msg}.
var roomScript = luabatch.NewScript("ledger_room", luaCommon+`
local first = level(1)
if not first then return {'NOPARENT', ARGV[1]} end
local lv, err = ancestors({first})
if not lv then return err end
local r, at = smallest(lv, 1, region(lv, 1))
return {'OK', first.status, r, limiter(lv[at])}
`)

// admitScript admits a thread's entry under its parent without setting
// money aside (the default): a new entry is created while the region above
// it has room; an existing one of the same parent is left as it is (a
// handoff's continuation shares its chain's entry) or, with reopen,
// reopened when released (a resume), as an admitted entry.
//
// KEYS, ARGV[1..n] the entry and its ancestors (see above)
// ARGV[n+1] max of a new entry (nano-USD)
// ARGV[n+2] "1": reopen a released entry
// Returns {"OK", fields..., left} with left the smallest room the entry
// now has over its region; {"EXISTS", parent} for an entry of another
// parent; {"RELEASED", status} (the parent of a new entry, or the entry
// without reopen); {"INSUFFICIENT", room, limiter id, max, actual,
// reserved} when nothing is left (nothing changes); {"NOPARENT", id};
// {"PATH", msg}.
var admitScript = luabatch.NewScript("ledger_admit", luaCommon+`
local n = #KEYS
local e = redis.call('HMGET', KEYS[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
local lv, err = ancestors({})
if not lv then return err end
local parent = ''
if n > 1 then parent = ARGV[2] end
if e[7] then
  if (e[1] or '') ~= parent then return {'EXISTS', e[1] or ''} end
  local self = {parent = parent, max = num(e[2]), res = num(e[3]), act = num(e[4]), status = 'active',
    g = e[8] == '1', id = ARGV[1], key = KEYS[1]}
  local reopen = e[7] ~= 'active'
  if reopen then
    if ARGV[n + 2] ~= '1' then return {'RELEASED', e[7]} end
    self.g = false
  end
  lv[1] = self
  local r, at = smallest(lv, 1, region(lv, 1))
  if reopen then
    if r <= 0 then return {'INSUFFICIENT', r, limiter(lv[at])} end
    redis.call('HSET', KEYS[1], 'status', 'active', 'g', 0)
  end
  local g = '0'
  if self.g then g = '1' end
  return {'OK', parent, self.max, self.res, self.act, num(e[5]), num(e[6]), 'active', g, r}
end
if n < 2 then return {'NOPARENT', ''} end
if lv[2].status ~= 'active' then return {'RELEASED', lv[2].status} end
local r, at = smallest(lv, 2, region(lv, 2))
if r <= 0 then return {'INSUFFICIENT', r, limiter(lv[at])} end
local max = num(ARGV[n + 1])
redis.call('HSET', KEYS[1], 'parent_id', parent, 'max', max, 'reserved', 0, 'actual', 0,
  'own', 0, 'overrun', 0, 'status', 'active', 'g', 0)
if max < r then r = max end
return {'OK', parent, max, 0, 0, 0, 0, 'active', '0', r}
`)

// reserveScript creates a guaranteed entry: amount is set aside for it in
// every level of the region above it (its parent's up to the first active
// guaranteed ancestor or the root), or nothing changes.
//
// KEYS, ARGV[1..n] the new entry and its ancestors (see above)
// ARGV[n+1] amount (nano-USD)
// Returns {"OK", fields...} (an existing entry of the same parent is OK
// and unchanged); {"EXISTS", parent}; {"NOPARENT", id}; {"RELEASED",
// parent status}; {"INSUFFICIENT", room, limiter id, max, actual,
// reserved}; {"PATH", msg}.
var reserveScript = luabatch.NewScript("ledger_reserve", luaCommon+`
local n = #KEYS
local c = redis.call('HMGET', KEYS[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
if n < 2 then return {'NOPARENT', ''} end
if c[7] then
  if c[1] ~= ARGV[2] then return {'EXISTS', c[1] or ''} end
  return {'OK', c[1], num(c[2]), num(c[3]), num(c[4]), num(c[5]), num(c[6]), c[7], c[8] or '0'}
end
local lv, err = ancestors({})
if not lv then return err end
if lv[2].status ~= 'active' then return {'RELEASED', lv[2].status} end
local amt = num(ARGV[n + 1])
local last = region(lv, 2)
local r, at = smallest(lv, 2, last)
if amt > r then return {'INSUFFICIENT', r, limiter(lv[at])} end
for j = 2, last do
  redis.call('HSET', lv[j].key, 'reserved', lv[j].res + amt)
end
redis.call('HSET', KEYS[1], 'parent_id', ARGV[2], 'max', amt, 'reserved', 0, 'actual', 0,
  'own', 0, 'overrun', 0, 'status', 'active', 'g', 1)
return {'OK', ARGV[2], amt, 0, 0, 0, 0, 'active', '1'}
`)

// chargeScript adds spend to an entry and to every ancestor at once, once
// per idempotency key, clamped to the smallest room over the entry's
// region (the levels whose ceilings the charge is not yet covered by a
// reservation under); the part that does not fit goes to the entry's
// overrun. Above the region the charge is spent out of the reservation
// the region's top level holds there (reserved → actual). The outcome of
// each key is kept in the entry's own hash, in the field "charge:<key>":
// "ok", or "over:<id of the level that did not have room>".
//
// KEYS, ARGV[1..n] the entry and its ancestors (see above)
// ARGV[n+1] idempotency key ("" = none: ReportActual's absolute mode)
// ARGV[n+2] amount (nano-USD); with ARGV[n+3] == "abs", the absolute total
//
//	of own + overrun the thread has spent, of which only the part not
//	yet recorded is charged
//
// ARGV[n+3] "add" | "abs"
// Returns {"ok"|"over", fields..., left, limiter id, max, actual,
// reserved} with left the smallest room over the region after the charge
// and the limiter the level that has it (for "over": the level that did
// not have room); {"NOTFOUND"}; {"RELEASED", status}; {"PATH", msg}.
var chargeScript = luabatch.NewScript("ledger_charge", luaCommon+`
local n = #KEYS
local key, mode = ARGV[n + 1], ARGV[n + 3]
local ck = 'charge:' .. key
local t = redis.call('HMGET', KEYS[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g', ck)
if not t[7] then return {'NOTFOUND'} end
local self = {parent = t[1] or '', max = num(t[2]), res = num(t[3]), act = num(t[4]), status = t[7],
  g = t[8] == '1', id = ARGV[1], key = KEYS[1]}
local lv, err = ancestors({self})
if not lv then return err end
local own, over = num(t[5]), num(t[6])
local last = region(lv, 1)
local function reply(outcome, at, left)
  local g = '0'
  if self.g then g = '1' end
  return {outcome, self.parent, self.max, self.res, self.act, own, over, self.status, g, left, limiter(lv[at])}
end
if key ~= '' and t[9] then
  local r, at = smallest(lv, 1, last)
  local outcome = t[9]
  if string.sub(outcome, 1, 5) == 'over:' then
    local who = string.sub(outcome, 6)
    for j = 1, n do
      if lv[j].id == who then at = j end
    end
    outcome = 'over'
  end
  return reply(outcome, at, r)
end
if t[7] ~= 'active' then return {'RELEASED', t[7]} end
local amt = num(ARGV[n + 2])
if mode == 'abs' then
  amt = amt - own - over
  if amt < 0 then amt = 0 end
end
local r, at = smallest(lv, 1, last)
local applied, extra = amt, 0
if amt > r then applied, extra = r, amt - r end
for j = 2, n do
  local l = lv[j]
  l.act = l.act + applied
  if j > last then
    l.res = l.res - applied
    redis.call('HSET', l.key, 'actual', l.act, 'reserved', l.res)
  else
    redis.call('HSET', l.key, 'actual', l.act)
  end
end
self.act, own, over = self.act + applied, own + applied, over + extra
local outcome, stored = 'ok', 'ok'
if extra > 0 then outcome, stored = 'over', 'over:' .. lv[at].id end
if key ~= '' then
  redis.call('HSET', KEYS[1], 'actual', self.act, 'own', own, 'overrun', over, ck, stored)
else
  redis.call('HSET', KEYS[1], 'actual', self.act, 'own', own, 'overrun', over)
end
return reply(outcome, at, r - applied)
`)

// releaseScript marks an entry final. A guaranteed entry gives back what
// is left of its reservation (max − actual − reserved: what it neither
// spent nor set aside for guaranteed descendants) to every level of the
// region above it; an admitted entry holds nothing, so only its status
// changes (its spend is already in every ancestor).
//
// KEYS, ARGV[1..n] the entry and its ancestors (see above)
// ARGV[n+1] final status (not "active")
// Returns {"OK", fields...}; {"ALREADY", fields...} if it was released
// before (nothing changes); {"NOTFOUND"}; {"PATH", msg}.
var releaseScript = luabatch.NewScript("ledger_release", luaCommon+`
local n = #KEYS
local e = redis.call('HMGET', KEYS[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
if not e[7] then return {'NOTFOUND'} end
local max, res, act = num(e[2]), num(e[3]), num(e[4])
local code = 'OK'
if e[7] ~= 'active' then code = 'ALREADY' end
local reply = {code, e[1], max, res, act, num(e[5]), num(e[6]), e[7], e[8] or '0'}
if code == 'ALREADY' then return reply end
if e[8] == '1' then
  local give = max - act - res
  if give > 0 and n > 1 then
    local self = {parent = e[1] or '', max = max, res = res, act = act, status = 'active', g = true, id = ARGV[1], key = KEYS[1]}
    local lv, err = ancestors({self})
    if not lv then return err end
    for j = 2, region(lv, 2) do
      redis.call('HSET', lv[j].key, 'reserved', lv[j].res - give)
    end
  end
end
redis.call('HSET', KEYS[1], 'status', ARGV[n + 1])
reply[8] = ARGV[n + 1]
return reply
`)
