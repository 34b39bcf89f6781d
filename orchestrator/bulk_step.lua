-- bulk_step.lua: the holder of a bulk operation records what it did to
-- the run at index ARGV[2] and moves past it, in one step, so a run's
-- outcome is counted once however often its runner dies: a runner that
-- lost its lease, or whose index another runner moved past, records
-- nothing and stops.
--
-- KEYS[1]  the operation's record (keyspace Bulk)
-- KEYS[2]  its failures (run id → error)
-- KEYS[3]  the running operations (keyspace BulkRunning)
-- ARGV[1]  the holder's token
-- ARGV[2]  the index of the run acted on
-- ARGV[3]  the outcome: done, skipped or failed
-- ARGV[4]  the run id
-- ARGV[5]  the error ("" unless failed)
-- ARGV[6]  now (unix ms)
-- ARGV[7]  the lease (ms), renewed
-- ARGV[8]  the operation id
-- ARGV[9]  now (RFC 3339), the finish time when this was the last run
--
-- Returns {1, status after} when recorded, {0} when the caller no longer
-- holds the operation at that index.

local cur = redis.call('HMGET', KEYS[1], 'status', 'owner', 'next', 'matched')
if cur[1] ~= 'running' or cur[2] ~= ARGV[1] or tonumber(cur[3]) ~= tonumber(ARGV[2]) then
  return {0}
end
local outcome = ARGV[3]
redis.call('HINCRBY', KEYS[1], outcome, 1)
if outcome == 'skipped' then
  redis.call('HINCRBY', KEYS[1], 'done', 1) -- done counts every run acted on
end
if outcome == 'failed' then
  redis.call('HSET', KEYS[2], ARGV[4], ARGV[5])
end
local next = tonumber(ARGV[2]) + 1
redis.call('HSET', KEYS[1], 'next', next, 'lease_until', tonumber(ARGV[6]) + tonumber(ARGV[7]))
if next >= tonumber(cur[4]) then
  redis.call('HSET', KEYS[1], 'status', 'completed', 'finished_at', ARGV[9], 'owner', '')
  redis.call('ZREM', KEYS[3], ARGV[8])
  return {1, 'completed'}
end
return {1, 'running'}
