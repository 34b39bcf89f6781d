package registry

import (
	_ "embed"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/redisfn"
)

// Lua is registry.lua: the registry's writes that compound scripts share
// (register, commit, link, restore; and forget, which reads the same
// status table), as the functions of the Lua table registry,
// each documented there with its keys, arguments, reply and refusals.
// The registry's scripts for them are Lua and a call of one function; a
// script of another package that runs one in the same atomic step as its
// own (package orchestrator's start.lua and finalize.lua) starts with Lua
// too, and reads the function's refusals with RefusalError.
//
//go:embed registry.lua
var Lua string

// The registry's scripts of registry.lua: Lua, and a call of one of its
// functions with the script's KEYS and ARGV, as Redis Functions (package
// redisfn: Lua is defined once per server, not on every call).
var (
	regRegisterScript = redisfn.New("register", Lua, "return registry.register(KEYS, ARGV)")
	regCommitScript   = redisfn.New("commit", Lua, "return registry.commit(KEYS, ARGV)")
	regLinkScript     = redisfn.New("link", Lua, "return registry.link(KEYS, ARGV)")
	regForgetScript   = redisfn.New("forget", Lua, "return registry.forget(KEYS, ARGV)")
	regRestoreScript  = redisfn.New("restore", Lua, "return registry.restore(KEYS, ARGV)")
)

// regSpawnScript checks and increments a parent's spawn counter.
//
// KEYS[1] spawns counter of the parent
// ARGV[1] limit (a negative limit is unlimited)
// Returns the new count; refuses SPAWNLIMIT <count> when the limit is
// reached (the counter is unchanged).
var regSpawnScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local lim = tonumber(ARGV[1])
if lim >= 0 and c >= lim then return redis.error_reply('SPAWNLIMIT ' .. c) end
return redis.call('INCR', KEYS[1])
`)

// regUnspawnScript decrements a parent's spawn counter, not below zero.
//
// KEYS[1] spawns counter of the parent
// Returns the new count.
var regUnspawnScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
if c <= 0 then return 0 end
return redis.call('DECR', KEYS[1])
`)

// regCancelScript sets a thread's cancel flag and publishes "<id> cancel"
// on the control channel, and on the events channel too, where workers of
// earlier versions listen for it (waiters ignore it: it is no status).
// The version is not bumped: a cancel request must not break the running
// activation's lease; the activation sees the flag and stops itself.
//
// KEYS[1] thread hash, KEYS[2] control channel, KEYS[3] events channel
// ARGV[1] thread id, ARGV[2] cascade to children ("1" or "0"; a "1" once
// set stays)
// Returns the thread's status; refuses NOTFOUND <id>.
var regCancelScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return redis.error_reply('NOTFOUND ' .. ARGV[1]) end
redis.call('HSET', KEYS[1], 'cancel_requested', '1')
if ARGV[2] == '1' or redis.call('HGET', KEYS[1], 'cancel_cascade') ~= '1' then
  redis.call('HSET', KEYS[1], 'cancel_cascade', ARGV[2])
end
redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' cancel')
redis.call('PUBLISH', KEYS[3], ARGV[1] .. ' cancel')
return st
`)
