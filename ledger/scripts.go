package ledger

import "github.com/spool-run/spool/internal/luabatch"

// Every script returns an array whose first element is a status string:
// "OK" (with the entry's fields after it, in entryFields order, amounts as
// integers) or an error code the Go side maps to a sentinel.
//
// The scripts are written for few redis.call()s (each costs more than the
// Lua around it): one HMGET per entry read, one HSET per entry written,
// replies computed in Lua rather than read back. Amounts go to redis.call
// as Lua numbers, which Redis renders with %.17g: exact integers below
// 2^53, far above MaxAmount in nano-USD.

const luaCommon = `
local function num(v) return tonumber(v) or 0 end
`

// registerScript creates a root entry.
//
// KEYS[1] ledger entry of the root
// ARGV[1] max (nano-USD)
// Returns {"OK", fields...} (also when it exists with the same max and no
// parent), {"EXISTS", fields...} otherwise.
var registerScript = luabatch.NewScript("ledger_register", luaCommon+`
local e = redis.call('HMGET', KEYS[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status')
if e[7] then
  local code = 'EXISTS'
  if (e[1] or '') == '' and e[2] == ARGV[1] then code = 'OK' end
  return {code, e[1], num(e[2]), num(e[3]), num(e[4]), num(e[5]), num(e[6]), e[7]}
end
redis.call('HSET', KEYS[1], 'parent_id', '', 'max', ARGV[1], 'reserved', 0, 'actual', 0,
  'own', 0, 'overrun', 0, 'status', 'active')
return {'OK', '', num(ARGV[1]), 0, 0, 0, 0, 'active'}
`)

// reserveScript reserves a child's budget from its parent's remaining.
//
// KEYS[1] ledger entry of the parent
// KEYS[2] ledger entry of the child
// ARGV[1] amount (nano-USD)
// ARGV[2] parent id
// Returns {"OK", child fields...}; {"EXISTS", child fields...} when the child
// exists under another parent (an existing child of the same parent is OK
// and unchanged); {"NOPARENT"}; {"RELEASED", parent status};
// {"INSUFFICIENT", remaining}.
var reserveScript = luabatch.NewScript("ledger_reserve", luaCommon+`
local c = redis.call('HMGET', KEYS[2], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status')
if c[7] then
  local code = 'EXISTS'
  if c[1] == ARGV[2] then code = 'OK' end
  return {code, c[1], num(c[2]), num(c[3]), num(c[4]), num(c[5]), num(c[6]), c[7]}
end
local p = redis.call('HMGET', KEYS[1], 'max', 'reserved', 'actual', 'status')
if not p[4] then return {'NOPARENT'} end
if p[4] ~= 'active' then return {'RELEASED', p[4]} end
local amt = num(ARGV[1])
local remaining = num(p[1]) - num(p[2]) - num(p[3])
if amt > remaining then return {'INSUFFICIENT', remaining} end
redis.call('HSET', KEYS[1], 'reserved', num(p[2]) + amt)
redis.call('HSET', KEYS[2], 'parent_id', ARGV[2], 'max', amt, 'reserved', 0, 'actual', 0,
  'own', 0, 'overrun', 0, 'status', 'active')
return {'OK', ARGV[2], amt, 0, 0, 0, 0, 'active'}
`)

// chargeScript adds spend to an entry, once per idempotency key, clamped to
// the entry's room (max − reserved − actual); the excess goes to overrun.
// The outcome of each key is kept in the entry's own hash, in the field
// "charge:<key>", so the check and the write are the same HMGET and HSET
// as the amounts' (two redis.call()s in all).
//
// KEYS[1] ledger entry
// ARGV[1] idempotency key ("" = none: ReportActual's absolute mode)
// ARGV[2] amount (nano-USD); with ARGV[3] == "abs", the absolute total of
//
//	own + overrun the thread has spent, of which only the part not yet
//	recorded is charged
//
// ARGV[3] "add" | "abs"
// Returns {"ok"|"over", fields...}; {"NOTFOUND"}; {"RELEASED", status}.
var chargeScript = luabatch.NewScript("ledger_charge", luaCommon+`
local ck = 'charge:' .. ARGV[1]
local e = redis.call('HMGET', KEYS[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', ck)
if not e[7] then return {'NOTFOUND'} end
local max, res, act, own, over = num(e[2]), num(e[3]), num(e[4]), num(e[5]), num(e[6])
if ARGV[1] ~= '' and e[8] then return {e[8], e[1], max, res, act, own, over, e[7]} end
if e[7] ~= 'active' then return {'RELEASED', e[7]} end
local amt = num(ARGV[2])
if ARGV[3] == 'abs' then
  amt = amt - own - over
  if amt <= 0 then return {'ok', e[1], max, res, act, own, over, e[7]} end
end
local room = max - res - act
if room < 0 then room = 0 end
local applied, extra = amt, 0
if amt > room then applied = room; extra = amt - room end
act, own, over = act + applied, own + applied, over + extra
local outcome = 'ok'
if extra > 0 then outcome = 'over' end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], 'actual', act, 'own', own, 'overrun', over, ck, outcome)
else
  redis.call('HSET', KEYS[1], 'actual', act, 'own', own, 'overrun', over)
end
return {outcome, e[1], max, res, act, own, over, e[7]}
`)

// releaseScript marks an entry final and cascades it up the ancestors.
//
// KEYS[1]     ledger entry being released
// KEYS[2..n]  ledger entries of its ancestors, parent first, up to the root
//
//	(at least up to the first ancestor that is still active)
//
// ARGV[1]     final status (not "active")
// ARGV[2..n]  the ancestor ids, in the order of KEYS[2..n]
// The delta (reserved += e.reserved − e.max, actual += e.actual) is applied
// to the parent, and again to each next ancestor while the previous one is
// already released. Everything is validated before anything is written.
// Returns {"OK", fields...}; {"ALREADY", fields...} if it was released
// before (nothing changes); {"NOTFOUND"}; {"ANCESTORS", message} when the
// ancestor list does not match the stored parents or stops too early.
var releaseScript = luabatch.NewScript("ledger_release", luaCommon+`
local e = redis.call('HMGET', KEYS[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status')
if not e[7] then return {'NOTFOUND'} end
local max, res, act = num(e[2]), num(e[3]), num(e[4])
local code = 'OK'
if e[7] ~= 'active' then code = 'ALREADY' end
local reply = {code, e[1], max, res, act, num(e[5]), num(e[6]), e[7]}
if code == 'ALREADY' then return reply end
local path = {}
local expect = e[1] or ''
local i = 1
while expect ~= '' do
  if KEYS[i+1] == nil then
    return {'ANCESTORS', 'ancestor list stops before ' .. expect}
  end
  if ARGV[i+1] ~= expect then
    return {'ANCESTORS', 'ancestor ' .. i .. ' is ' .. tostring(ARGV[i+1]) .. ', stored parent is ' .. expect}
  end
  local a = redis.call('HMGET', KEYS[i+1], 'parent_id', 'status', 'reserved', 'actual')
  if not a[2] then return {'ANCESTORS', 'ancestor ' .. expect .. ' has no ledger entry'} end
  path[i] = a
  if a[2] == 'active' then break end
  expect = a[1] or ''
  i = i + 1
end
local dres = res - max
for j, a in ipairs(path) do
  redis.call('HSET', KEYS[j+1], 'reserved', num(a[3]) + dres, 'actual', num(a[4]) + act)
end
redis.call('HSET', KEYS[1], 'status', ARGV[1])
reply[8] = ARGV[1]
return reply
`)
