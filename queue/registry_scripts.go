package queue

import (
	"sort"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/spool-run/spool/internal/luabatch"
	"github.com/spool-run/spool/thread"
)

// luaStatusTables renders thread's transition table and terminal set as Lua,
// so the scripts enforce exactly the table the Go code tests:
//
//	local TRANS = {created={running=true,...},...}
//	local TERMINAL = {completed=true,...}
func luaStatusTables() string {
	var b strings.Builder
	b.WriteString("local TRANS = {")
	tr := thread.Transitions()
	froms := make([]string, 0, len(tr))
	for from := range tr {
		froms = append(froms, string(from))
	}
	sort.Strings(froms)
	for _, from := range froms {
		b.WriteString("['" + from + "']={")
		for _, to := range tr[thread.Status(from)] {
			b.WriteString("['" + string(to) + "']=true,")
		}
		b.WriteString("},")
	}
	b.WriteString("}\nlocal TERMINAL = {")
	for _, s := range thread.Statuses {
		if s.Terminal() {
			b.WriteString("['" + string(s) + "']=true,")
		}
	}
	b.WriteString("}\n")
	return b.String()
}

// Scripts reply with a table whose first element is "OK" or an error code;
// the Go side maps codes to errors (registry.go: scriptError).

// regRegisterScript registers a new thread.
//
// KEYS[1] thread hash, KEYS[2] threads zset, KEYS[3] active set,
// [KEYS[4] parent thread hash, KEYS[5] parent's children set]
// ARGV[1] thread id, ARGV[2] now (RFC3339Nano), ARGV[3] now (unix ms),
// ARGV[4] parent id ("" for a root), ARGV[5..] field/value pairs
// The record gets status created, version 1, activation 0, chain_root_id
// (if not given) = its id, and ancestors/depth from the parent's.
// Returns {"OK", ancestors (JSON), depth, chain_root_id}; {"EXISTS"};
// {"NOPARENT"}. The caller has every other field already: it builds the
// record without reading it back.
var regRegisterScript = luabatch.NewScript("registry_register", `
if redis.call('EXISTS', KEYS[1]) == 1 then return {'EXISTS'} end
local anc, depth = '[]', 0
if ARGV[4] ~= '' then
  local p = redis.call('HMGET', KEYS[4], 'thread_id', 'ancestors', 'depth')
  if not p[1] then return {'NOPARENT'} end
  local list = {}
  if p[2] and p[2] ~= '' then list = cjson.decode(p[2]) end
  table.insert(list, ARGV[4])
  anc = cjson.encode(list)
  depth = (tonumber(p[3]) or 0) + 1
  redis.call('SADD', KEYS[5], ARGV[1])
end
if #ARGV > 4 then redis.call('HSET', KEYS[1], unpack(ARGV, 5)) end
redis.call('HSET', KEYS[1], 'thread_id', ARGV[1], 'parent_id', ARGV[4], 'status', 'created',
  'version', 1, 'activation', 0, 'ancestors', anc, 'depth', depth,
  'created_at', ARGV[2], 'updated_at', ARGV[2])
local root = redis.call('HGET', KEYS[1], 'chain_root_id')
if not root or root == '' then
  root = ARGV[1]
  redis.call('HSET', KEYS[1], 'chain_root_id', root)
end
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])
redis.call('SADD', KEYS[3], ARGV[1])
return {'OK', anc, depth, root}
`)

// regCommitScript is the one versioned write: an optional checked status
// transition plus any fields, bumping the version.
//
// KEYS[1] thread hash, KEYS[2] active set, KEYS[3] events channel
// ARGV[1] thread id, ARGV[2] expected version ("0" = any), ARGV[3] target
// status ("" = unchanged), ARGV[4] now (RFC3339Nano), ARGV[5] mode
// ("commit" | "claim"), ARGV[6] transcript mark: segments ("" = unchanged),
// ARGV[7] the mark's chain hash, ARGV[8..] field/value pairs
// A target equal to the current status is no transition. A terminal target
// leaves the active set. A status change is published as "<id> <status>".
// The transcript mark only rises: one with no more segments than
// transcript_segments is ignored.
// mode claim: the target is running, allowed from created, waiting and
// running (takeover); the activation counter is incremented.
// Returns {"OK", new version} or, for claim, {"OK", new version, HGETALL};
// {"NOTFOUND"}; {"CONFLICT", actual}; {"TRANSITION", from, to};
// {"TERMINAL", status}.
var regCommitScript = luabatch.NewScript("registry_commit", luaStatusTables()+`
local cur = redis.call('HMGET', KEYS[1], 'status', 'version')
if not cur[1] then return {'NOTFOUND'} end
if ARGV[2] ~= '0' and ARGV[2] ~= cur[2] then return {'CONFLICT', cur[2]} end
local from, to = cur[1], ARGV[3]
if ARGV[5] == 'claim' then
  if TERMINAL[from] then return {'TERMINAL', from} end
  if from ~= 'created' and from ~= 'waiting' and from ~= 'running' then return {'TRANSITION', from, 'running'} end
  to = 'running'
end
local changed = false
if to ~= '' and to ~= from then
  if not (TRANS[from] and TRANS[from][to]) then return {'TRANSITION', from, to} end
  changed = true
end
if #ARGV > 7 then redis.call('HSET', KEYS[1], unpack(ARGV, 8)) end
if ARGV[6] ~= '' and tonumber(ARGV[6]) > tonumber(redis.call('HGET', KEYS[1], 'transcript_segments') or '0') then
  redis.call('HSET', KEYS[1], 'transcript_segments', ARGV[6], 'transcript_chain_hash', ARGV[7])
end
if changed then redis.call('HSET', KEYS[1], 'status', to) end
if ARGV[5] == 'claim' then redis.call('HINCRBY', KEYS[1], 'activation', 1) end
local nv = redis.call('HINCRBY', KEYS[1], 'version', 1)
redis.call('HSET', KEYS[1], 'updated_at', ARGV[4])
if changed then
  if TERMINAL[to] then redis.call('SREM', KEYS[2], ARGV[1]) end
  redis.call('PUBLISH', KEYS[3], ARGV[1] .. ' ' .. to)
end
if ARGV[5] == 'claim' then return {'OK', nv, redis.call('HGETALL', KEYS[1])} end
return {'OK', nv}
`)

// regLinkScript links a continuation: old → new.
//
// KEYS[1] old thread hash, KEYS[2] active set, KEYS[3] events channel,
// [KEYS[4] new thread hash]
// ARGV[1] old id, ARGV[2] new id, ARGV[3] now (RFC3339Nano)
// Old: continuation_thread_id = new; running (a handoff) or a finished
// status (completed, error, cancelled: a user resume) → continued,
// published, leaving the active set; created or waiting is a TRANSITION
// error. New (when KEYS[4] is given):
// continuation_of = old, chain_root_id = old's chain root, and
// previous_thread_id = old if unset. Both versions are bumped. Linking the
// same pair again changes nothing.
// Returns {"OK", old version, new version (0 without KEYS[4])};
// {"NOTFOUND", id}; {"LINKED", message}; {"TRANSITION", from, to}.
var regLinkScript = luabatch.NewScript("registry_link", luaStatusTables()+`
if ARGV[1] == ARGV[2] then return {'LINKED', 'a thread cannot continue itself'} end
local o = redis.call('HMGET', KEYS[1], 'status', 'continuation_thread_id', 'chain_root_id', 'version')
if not o[1] then return {'NOTFOUND', ARGV[1]} end
local n
if KEYS[4] then
  n = redis.call('HMGET', KEYS[4], 'status', 'continuation_of', 'continuation_thread_id', 'version')
  if not n[1] then return {'NOTFOUND', ARGV[2]} end
end
if o[2] and o[2] ~= '' then
  if o[2] ~= ARGV[2] then return {'LINKED', ARGV[1] .. ' already continues as ' .. o[2]} end
  if not n or n[2] == ARGV[1] then return {'OK', tonumber(o[4]), n and tonumber(n[4]) or 0} end
end
if n then
  if n[2] and n[2] ~= '' and n[2] ~= ARGV[1] then return {'LINKED', ARGV[2] .. ' already continues ' .. n[2]} end
  if n[3] and n[3] ~= '' then return {'LINKED', ARGV[2] .. ' already has a continuation ' .. n[3]} end
end
local from, to = o[1], 'continued'
if from ~= 'running' and not TERMINAL[from] then return {'TRANSITION', from, 'continued'} end
redis.call('HSET', KEYS[1], 'continuation_thread_id', ARGV[2], 'status', to, 'updated_at', ARGV[3])
local ov = redis.call('HINCRBY', KEYS[1], 'version', 1)
if to ~= from then
  redis.call('SREM', KEYS[2], ARGV[1])
  redis.call('PUBLISH', KEYS[3], ARGV[1] .. ' ' .. to)
end
local nv = 0
if n then
  local root = o[3]
  if not root or root == '' then root = ARGV[1] end
  redis.call('HSET', KEYS[4], 'continuation_of', ARGV[1], 'chain_root_id', root, 'updated_at', ARGV[3])
  local prev = redis.call('HGET', KEYS[4], 'previous_thread_id')
  if not prev or prev == '' then redis.call('HSET', KEYS[4], 'previous_thread_id', ARGV[1]) end
  nv = redis.call('HINCRBY', KEYS[4], 'version', 1)
end
return {'OK', ov, nv}
`)

// regSpawnScript checks and increments a parent's spawn counter.
//
// KEYS[1] spawns counter of the parent
// ARGV[1] limit (a negative limit is unlimited)
// Returns {1, new count} or {0, current count} when the limit is reached
// (the counter is unchanged).
var regSpawnScript = redis.NewScript(`
local c = tonumber(redis.call('GET', KEYS[1]) or '0')
local lim = tonumber(ARGV[1])
if lim >= 0 and c >= lim then return {0, c} end
return {1, redis.call('INCR', KEYS[1])}
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
// Returns {"OK", status}; {"NOTFOUND"}.
var regCancelScript = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return {'NOTFOUND'} end
redis.call('HSET', KEYS[1], 'cancel_requested', '1')
if ARGV[2] == '1' or redis.call('HGET', KEYS[1], 'cancel_cascade') ~= '1' then
  redis.call('HSET', KEYS[1], 'cancel_cascade', ARGV[2])
end
redis.call('PUBLISH', KEYS[2], ARGV[1] .. ' cancel')
redis.call('PUBLISH', KEYS[3], ARGV[1] .. ' cancel')
return {'OK', st}
`)
