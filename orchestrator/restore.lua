-- restore.lua: a thread that Redis lost, registered again from the blob
-- store in one atomic step (Orchestrator.Restore). It runs after
-- ledger.lua (package ledger) and registry.lua (package registry), whose
-- functions it calls: first registry.restorable, so that a thread
-- registered meanwhile (restored by another process) changes nothing;
-- then the ledger: the thread's entry made again (ledger.restore), the
-- turns its transcript records charged, each under its idempotency key
-- (ledger.charge; a charge an entry released before the loss refuses is
-- skipped), the entry released when the thread had finished
-- (ledger.release); then the record, whole (registry.restore).
--
-- KEYS[1..n]   the ledger entry, then its ancestors', parent first
--              (n = ARGV[1])
-- KEYS[n+1..]  registry.restore's keys: thread hash, threads zset,
--              active set, events channel, tenant's threads zset[,
--              parent's thread hash, parent's children set]
-- ARGV[1]      n
-- ARGV[2..n+1] the ledger ids of KEYS[1..n]
-- ARGV[n+2]    the entry's max (nano-USD), should it be made again
-- ARGV[n+3]    m, the number of charges
-- ARGV[n+4..n+3+2m]
--              per charge: its idempotency key, its amount (nano-USD)
-- ARGV[n+4+2m] the final status to release the entry with ("": leave it
--              active)
-- ARGV[n+5+2m] the thread's tenant, written on the ledger entry
-- ARGV[n+6+2m..] registry.restore's arguments: thread id, created at
--              (unix ms), status, parent id, field/value pairs
--
-- Returns registry.restore's reply: {ancestors (JSON), depth}. Refuses
-- as registry.restorable does (EXISTS, NOPARENT), then as ledger.restore
-- does (ENTRYEXISTS, NOENTRY, PATH), each before anything is written.

local n = tonumber(ARGV[1])
local lkeys, ids = {}, {}
for i = 1, n do
  lkeys[i], ids[i] = KEYS[i], ARGV[1 + i]
end
local m = tonumber(ARGV[n + 3])
local rkeys, rargv = {}, {}
for i = n + 1, #KEYS do rkeys[#rkeys + 1] = KEYS[i] end
for i = n + 6 + 2 * m, #ARGV do rargv[#rargv + 1] = ARGV[i] end

local refused = registry.restorable(rkeys, rargv)
if refused then return refused end

-- args is the ledger ids followed by the function's own arguments.
local function args(...)
  local a = {}
  for i = 1, n do a[i] = ids[i] end
  for _, v in ipairs({...}) do a[#a + 1] = v end
  return a
end

local entry = ledger.restore(lkeys, args(ARGV[n + 2]))
if entry.err then return entry end
redis.call('HSET', KEYS[1], 'tenant', ARGV[n + 5 + 2 * m])
for j = 1, m do
  local c = ledger.charge(lkeys, args(ARGV[n + 2 + 2 * j], ARGV[n + 3 + 2 * j], 'add'))
  if c.err and string.sub(c.err, 1, 8) ~= 'RELEASED' then return c end
end
local final = ARGV[n + 4 + 2 * m]
if final ~= '' then
  local r = ledger.release(lkeys, args(final))
  if r.err then return r end
end
return registry.restore(rkeys, rargv)
