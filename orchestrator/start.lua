-- start.lua: a new thread's budget and registration, in one atomic step
-- (Orchestrator.Start). It runs after ledger.lua (package ledger) and
-- registry.lua (package registry), whose functions it calls: first the
-- budget, by ARGV[1]:
--
--   register  a root's entry, its spend limit the ceiling (ledger.register)
--   admit     a child's entry under its parent, or a continuation's chain
--             entry, admitted or reopened (ledger.admit)
--   reserve   a guaranteed child's entry, its spend limit set aside
--             (ledger.reserve)
--
-- then, once the budget is there, the entry's tenant (the run's) and the
-- record (registry.register).
--
-- KEYS[1..n]   the ledger entry, then its ancestors', parent first
--              (n = ARGV[2]; 1 for register)
-- KEYS[n+1..]  registry.register's keys: thread hash, threads zset,
--              active set, tenant's threads zset[, parent's thread hash,
--              parent's children set]
-- ARGV[1]      the budget function: register | admit | reserve
-- ARGV[2]      n
-- ARGV[3..n+2] the ledger ids of KEYS[1..n]
-- ARGV[n+3]    amount (nano-USD): the entry's ceiling, or the reservation
-- ARGV[n+4]    "1": reopen a released entry (admit: a resume)
-- ARGV[n+5]    the run's tenant, written on the ledger entry
-- ARGV[n+6..]  registry.register's arguments: thread id, now, now (unix
--              ms), parent id, field/value pairs
--
-- Returns registry.register's reply: {ancestors (JSON), depth, chain root
-- id}. Refuses as the budget function does (nothing is written), then as
-- registry.register does (the budget stays: Start releases it).

local n = tonumber(ARGV[2])
local lkeys, largv = {}, {}
for i = 1, n do
  lkeys[i], largv[i] = KEYS[i], ARGV[2 + i]
end
local budget
if ARGV[1] == 'register' then
  budget = ledger.register(lkeys, {ARGV[n + 3]})
elseif ARGV[1] == 'admit' then
  largv[n + 1], largv[n + 2] = ARGV[n + 3], ARGV[n + 4]
  budget = ledger.admit(lkeys, largv)
elseif ARGV[1] == 'reserve' then
  largv[n + 1] = ARGV[n + 3]
  budget = ledger.reserve(lkeys, largv)
else
  return redis.error_reply('ERR start.lua: unknown budget function ' .. ARGV[1])
end
if budget.err then return budget end
redis.call('HSET', KEYS[1], 'tenant', ARGV[n + 5])

local rkeys, rargv = {}, {}
for i = n + 1, #KEYS do rkeys[#rkeys + 1] = KEYS[i] end
for i = n + 6, #ARGV do rargv[#rargv + 1] = ARGV[i] end
return registry.register(rkeys, rargv)
