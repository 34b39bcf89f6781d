-- finalize.lua: the end of a thread, in one atomic step
-- (Orchestrator.Finalize). It runs after registry.lua (package registry) and
-- ledger.lua (package ledger), whose functions it calls, in this order:
--
--   1. registry.commit: the end (status, result, outputs, error, cost,
--      the transcript's final mark), fenced by the version the caller
--      holds;
--   2. a handoff (ARGV[4] not ""): registry.link, and the thread is
--      continued;
--   3. a last charge (ARGV[6] not ""): ledger.charge on the chain's entry;
--      one clamped to the room left is no refusal;
--   4. no handoff: ledger.release of the chain's entry (with the status
--      committed), and the chain's waiters, read for the caller to wake;
--   5. a lease (ARGV[5] not ""): released if the caller's token holds it.
--
-- A refusal ends the script where it comes: a stale version (1) changes
-- nothing; a refusal of a later step leaves the steps before it written,
-- as separate scripts would.
--
-- KEYS[1..3]     registry.commit's keys: thread hash, active set, events
--                channel
-- KEYS[4]        the thread's lease key
-- KEYS[5]        the waiters set of the thread's chain
-- KEYS[6..5+n]   the chain's ledger entry, then its ancestors', parent
--                first (n = ARGV[7])
-- KEYS[6+n]      a handoff: the continuation's thread hash
-- KEYS[#KEYS]    the thread's shard's outbox (registry.commit's keys[4])
-- ARGV[1]        thread id
-- ARGV[2]        now (RFC3339Nano)
-- ARGV[3]        the status committed ("" for a handoff)
-- ARGV[4]        the continuation's id ("": no handoff)
-- ARGV[5]        the lease's token ("": none)
-- ARGV[6]        the charge's idempotency key ("": no charge)
-- ARGV[7]        n
-- ARGV[8]        the charge's amount (nano-USD)
-- ARGV[9..8+n]   the ledger ids of KEYS[6..5+n]
-- ARGV[9+n..]    registry.commit's arguments
--
-- Returns {version, the continuation's version (0: no handoff),
-- ledger.charge's reply (false: no charge), the waiters' ids}. Refuses as
-- registry.commit, registry.link, ledger.charge and ledger.release do.

local n = tonumber(ARGV[7])
local function ledgerArgs(...)
  local argv = {}
  for i = 1, n do argv[i] = ARGV[8 + i] end
  for _, a in ipairs({...}) do argv[#argv + 1] = a end
  return argv
end
local lkeys = {}
for i = 1, n do lkeys[i] = KEYS[5 + i] end

local commit = {}
for i = 9 + n, #ARGV do commit[#commit + 1] = ARGV[i] end
local c = registry.commit({KEYS[1], KEYS[2], KEYS[3], KEYS[#KEYS]}, commit)
if c.err then return c end
local out = {c[1], 0, false, {}}

if ARGV[4] ~= '' then
  local l = registry.link({KEYS[1], KEYS[2], KEYS[3], KEYS[6 + n]}, {ARGV[1], ARGV[4], ARGV[2]})
  if l.err then return l end
  out[1], out[2] = l[1], l[2]
end
if ARGV[6] ~= '' then
  local watch = registry.budgetWatch(KEYS[1], lkeys[n])
  local ch = ledger.charge(lkeys, ledgerArgs(ARGV[6], ARGV[8], 'add'))
  if ch.err then return ch end
  out[3] = ch
  registry.budgetCrossed(watch, KEYS[#KEYS], lkeys[n], ARGV[8 + n], ARGV[2])
end
if ARGV[4] == '' then
  local r = ledger.release(lkeys, ledgerArgs(ARGV[3]))
  if r.err then return r end
  out[4] = redis.call('SMEMBERS', KEYS[5])
end
if ARGV[5] ~= '' and redis.call('GET', KEYS[4]) == ARGV[5] then redis.call('DEL', KEYS[4]) end
return out
