-- park.lua notes on a thread that admission parked its activation (the
-- activation waits in its tenant's queues, not in asynq): status waiting,
-- what it waits for, and the activation (adm_act), which a claim of that
-- activation accepts and clears. A fenced write: only at the version the
-- caller read, and only over created or waiting, or over a running
-- thread no activation holds (no lease) whose recovery at that version
-- is what was parked (a yield, a handed-back retry): never over a
-- running thread an activation holds, nor a finished one.
--
-- KEYS[1] thread hash, KEYS[2] events channel, KEYS[3] lease key
-- ARGV[1] version, ARGV[2] activation id, ARGV[3] waiting for, ARGV[4] tenant,
-- ARGV[5] now (RFC3339Nano)
-- Returns 1, or 0 when the thread moved on (its version or status).
local h = redis.call('HMGET', KEYS[1], 'status', 'version', 'thread_id')
if not h[1] or tonumber(h[2] or '0') ~= tonumber(ARGV[1]) then return 0 end
local released = h[1] == 'running' and ARGV[2] == h[3] .. '@recover-' .. ARGV[1] and redis.call('EXISTS', KEYS[3]) == 0
if h[1] ~= 'created' and h[1] ~= 'waiting' and not released then return 0 end
redis.call('HSET', KEYS[1], 'status', 'waiting', 'waiting_for', ARGV[3], 'adm_act', ARGV[2], 'adm_tenant', ARGV[4], 'updated_at', ARGV[5])
if h[1] ~= 'waiting' then redis.call('PUBLISH', KEYS[2], h[3] .. ' waiting') end
return 1
