-- checkpoint.lua: a running thread's checkpoint commit, in one atomic step
-- (Orchestrator.Checkpoint). It runs after registry.lua (package registry)
-- and ledger.lua (package ledger), whose functions it calls, in this order:
--
--   1. registry.commit: the turn's commit (cost, transcript mark, fields),
--      fenced by the version the caller holds;
--   2. the turn's charge (ARGV[2] not ""): ledger.charge on the chain's
--      entry and its ancestors; one clamped to the room left is no
--      refusal (without a charge, the script may run without ledger.lua);
--   3. the lease (ARGV[4] not ""): renewed for ARGV[5] ms if the caller's
--      token holds it.
--
-- A stale version (1) is refused and changes nothing. A refusal of the
-- charge does not undo the commit: it is returned in the reply, with the
-- version the commit made, so the caller holds the thread still.
--
-- KEYS[1..3]     registry.commit's keys: thread hash, active set, events
--                channel
-- KEYS[4]        the thread's lease key
-- KEYS[5..4+n]   the chain's ledger entry, then its ancestors', parent
--                first (n = ARGV[1]; 0 without a charge)
-- KEYS[5+n]      the thread's shard's outbox (a charge that takes the
--                tree's spend across a share of its limit is an event:
--                registry.budgetCrossed)
-- ARGV[1]        n
-- ARGV[2]        the charge's idempotency key ("": no charge)
-- ARGV[3]        the charge's amount (nano-USD)
-- ARGV[4]        the lease's token ("": leave the lease alone)
-- ARGV[5]        the lease's time to live (ms)
-- ARGV[6..5+n]   the ledger ids of KEYS[5..4+n]
-- ARGV[6+n..]    registry.commit's arguments
--
-- Returns {version, ledger.charge's reply (false: no charge or refused),
-- the charge's refusal ("": none), the lease held (1 or 0; 1 without a
-- token)}. Refuses as registry.commit does.
--
-- The cancel flag and the inbox are not read here: a message sent after
-- the commit must still reach the model's next call, so the next turn
-- reads them when it begins (registry.TurnSignals).

local n = tonumber(ARGV[1])
local commit = {}
for i = 6 + n, #ARGV do commit[#commit + 1] = ARGV[i] end
local c = registry.commit({KEYS[1], KEYS[2], KEYS[3]}, commit)
if c.err then return c end
local out = {c[1], false, '', 1}

if ARGV[2] ~= '' then
  local lkeys, largv = {}, {}
  for i = 1, n do
    lkeys[i] = KEYS[4 + i]
    largv[i] = ARGV[5 + i]
  end
  largv[n + 1], largv[n + 2], largv[n + 3] = ARGV[2], ARGV[3], 'add'
  local watch = registry.budgetWatch(KEYS[1], lkeys[n])
  local ch = ledger.charge(lkeys, largv)
  if ch.err then out[3] = ch.err else out[2] = ch end
  registry.budgetCrossed(watch, KEYS[5 + n], lkeys[n], largv[n], commit[4])
end
if ARGV[4] ~= '' then
  if redis.call('GET', KEYS[4]) == ARGV[4] then
    redis.call('PEXPIRE', KEYS[4], ARGV[5])
  else
    out[4] = 0
  end
end
return out
