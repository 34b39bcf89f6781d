-- follow.lua asks that thread id's worker publish it live (RequestFollow).
--
-- KEYS[1] thread hash, KEYS[2] control channel
-- ARGV[1] thread id, ARGV[2] followed until (unix ms)
-- The thread's followed_until is set, so that an activation that begins
-- before the next request publishes from its start (it reads the field
-- in its claimed record), and "<id> follow" is published for the one
-- running now. A thread that is not registered gets nothing written.

if redis.call('EXISTS', KEYS[1]) == 1 then
  redis.call('HSET', KEYS[1], 'followed_until', ARGV[2])
end
redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' follow')
return 1
