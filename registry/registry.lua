-- registry.lua: the thread registry's writes that compound scripts share
-- (package registry), as Lua functions of one table, registry. The
-- registry's own scripts for them are this file and one line that calls
-- one function with KEYS and ARGV (scripts.go); the compound
-- scripts of package orchestrator (start.lua, finalize.lua, restore.lua)
-- call them with slices of theirs.
--
-- Replies (package reply): a table, or a refusal, each before anything is
-- written:
--
--   NOTFOUND <id>            no record for the thread
--   EXISTS <id>              the thread is registered already
--   NOPARENT <id>            the parent is not registered
--   CONFLICT <actual>        a stale version: the thread is at actual
--   TRANSITION <from> <to>   a status change the table below forbids
--   LINKED <message>         a continuation link would overwrite another
--
-- The status table is thread.Transitions() (TestTransitionTableInLua runs
-- every pair through commit).

local registry = {}
do
  local TRANS = {
    created = {running = true, waiting = true, error = true, cancelled = true},
    running = {waiting = true, paused = true, completed = true, error = true, cancelled = true, continued = true},
    waiting = {running = true, paused = true, error = true, cancelled = true},
    paused = {running = true, waiting = true, error = true, cancelled = true},
  }
  local TERMINAL = {completed = true, error = true, cancelled = true, continued = true}
  -- ENDS are the terminal statuses that end a run (a continued thread's
  -- run goes on in its continuation): a root's is a webhook event.
  local ENDS = {completed = true, error = true, cancelled = true}

  -- outboxMax bounds a shard's outbox (approximately): events past it,
  -- oldest first, are dropped if nothing relays them for that long.
  local outboxMax = '100000'

  -- event appends run event typ of thread id to its shard's outbox
  -- (keyspace.Outbox), at now (RFC3339Nano); key tells one event of the
  -- type of the thread from another ("" for one that happens once).
  function registry.event(outbox, id, typ, now, key)
    redis.call('XADD', outbox, 'MAXLEN', '~', outboxMax, '*', 'thread', id, 'type', typ, 'at', now, 'key', key)
  end

  -- register registers a new thread.
  --
  -- keys[1] thread hash, keys[2] threads zset, keys[3] active set,
  -- keys[4] its tenant's threads zset, [keys[5] parent thread hash,
  -- keys[6] parent's children set], then its directive's and its tags'
  -- threads zsets
  -- argv[1] thread id, argv[2] now (RFC3339Nano), argv[3] now (unix ms),
  -- argv[4] parent id ("" for a root), argv[5..] field/value pairs
  -- The record gets status created, version 1, activation 0,
  -- chain_root_id (if not given) = its id, and ancestors/depth from the
  -- parent's. Returns {ancestors (JSON), depth, chain_root_id}: the
  -- caller has every other field already and builds the record without
  -- reading it back. Refuses EXISTS, NOPARENT.
  function registry.register(keys, argv)
    if redis.call('EXISTS', keys[1]) == 1 then return redis.error_reply('EXISTS ' .. argv[1]) end
    local anc, depth = '[]', 0
    if argv[4] ~= '' then
      local p = redis.call('HMGET', keys[5], 'thread_id', 'ancestors', 'depth', 'pause_requested')
      if not p[1] then return redis.error_reply('NOPARENT ' .. argv[4]) end
      -- A paused run's children are paused with it: one its activation
      -- spawns after the request pauses at its first boundary.
      if p[4] == '1' then redis.call('HSET', keys[1], 'pause_requested', '1') end
      local list = {}
      if p[2] and p[2] ~= '' then list = cjson.decode(p[2]) end
      table.insert(list, argv[4])
      anc = cjson.encode(list)
      depth = (tonumber(p[3]) or 0) + 1
      redis.call('SADD', keys[6], argv[1])
    end
    if #argv > 4 then redis.call('HSET', keys[1], unpack(argv, 5)) end
    redis.call('HSET', keys[1], 'thread_id', argv[1], 'parent_id', argv[4], 'status', 'created',
      'version', 1, 'activation', 0, 'ancestors', anc, 'depth', depth,
      'created_at', argv[2], 'updated_at', argv[2])
    local root = redis.call('HGET', keys[1], 'chain_root_id')
    if not root or root == '' then
      root = argv[1]
      redis.call('HSET', keys[1], 'chain_root_id', root)
    end
    redis.call('ZADD', keys[2], argv[3], argv[1])
    redis.call('ZADD', keys[4], argv[3], argv[1])
    local tags = 5
    if argv[4] ~= '' then tags = 7 end
    for i = tags, #keys do redis.call('ZADD', keys[i], argv[3], argv[1]) end
    redis.call('SADD', keys[3], argv[1])
    return {anc, depth, root}
  end

  -- restorable checks that restore may write: the thread is not
  -- registered, and its parent is. Returns nil, or the refusal (EXISTS,
  -- NOPARENT), before anything is written: a compound script
  -- (orchestrator's restore.lua) calls it before its own writes.
  --
  -- keys and argv are restore's.
  function registry.restorable(keys, argv)
    if redis.call('EXISTS', keys[1]) == 1 then return redis.error_reply('EXISTS ' .. argv[1]) end
    if argv[4] ~= '' and redis.call('EXISTS', keys[6]) == 0 then return redis.error_reply('NOPARENT ' .. argv[4]) end
    return nil
  end

  -- restore registers again, whole, the record of a thread that Redis
  -- lost and the blob store restores (its signed thread.json and
  -- transcript: package orchestrator's Restore): every field as given,
  -- status and version included, but ancestors and depth, which come
  -- from the parent's record as register derives them.
  --
  -- keys[1] thread hash, keys[2] threads zset, keys[3] active set,
  -- keys[4] events channel, keys[5] its tenant's threads zset, [keys[6]
  -- parent thread hash, keys[7] parent's children set], then its
  -- directive's and its tags' threads zsets
  -- argv[1] thread id, argv[2] created at (unix ms: the threads zset's
  -- score), argv[3] status, argv[4] parent id ("" for a root), argv[5..]
  -- field/value pairs
  -- An unfinished status joins the active set; the status is published
  -- as "<id> <status>". Returns {ancestors (JSON), depth}; refuses
  -- EXISTS, NOPARENT.
  function registry.restore(keys, argv)
    local refused = registry.restorable(keys, argv)
    if refused then return refused end
    local anc, depth = '[]', 0
    if argv[4] ~= '' then
      local p = redis.call('HMGET', keys[6], 'ancestors', 'depth')
      local list = {}
      if p[1] and p[1] ~= '' then list = cjson.decode(p[1]) end
      table.insert(list, argv[4])
      anc = cjson.encode(list)
      depth = (tonumber(p[2]) or 0) + 1
      redis.call('SADD', keys[7], argv[1])
    end
    redis.call('HSET', keys[1], unpack(argv, 5))
    redis.call('HSET', keys[1], 'thread_id', argv[1], 'parent_id', argv[4], 'status', argv[3],
      'ancestors', anc, 'depth', depth)
    redis.call('ZADD', keys[2], argv[2], argv[1])
    redis.call('ZADD', keys[5], argv[2], argv[1])
    local tags = 6
    if argv[4] ~= '' then tags = 8 end
    for i = tags, #keys do redis.call('ZADD', keys[i], argv[2], argv[1]) end
    if not TERMINAL[argv[3]] then redis.call('SADD', keys[3], argv[1]) end
    redis.call('PUBLISH', keys[4], argv[1] .. ' ' .. argv[3])
    return {anc, depth}
  end

  -- BUDGET are the shares (percent) of a tree's spend limit whose
  -- crossing is a budget.threshold event.
  local BUDGET = {50, 80, 100}

  -- budgetWatch reads, before a charge, the spend and limit of the
  -- tree's root ledger entry rootKey when the thread (threadKey) has
  -- webhooks; nil otherwise: budgetCrossed then does nothing.
  function registry.budgetWatch(threadKey, rootKey)
    if redis.call('HGET', threadKey, 'webhooks') ~= '1' then return nil end
    local t = redis.call('HMGET', rootKey, 'actual', 'max')
    return {tonumber(t[1]) or 0, tonumber(t[2]) or 0}
  end

  -- budgetCrossed appends to outbox a budget.threshold event of the
  -- root (rootID: its ledger id, its chain's first thread) for each
  -- share of BUDGET the charge took the root's spend across (key: the
  -- share), after a charge watched by budgetWatch.
  function registry.budgetCrossed(watch, outbox, rootKey, rootID, now)
    if not watch or watch[2] <= 0 then return end
    local after = tonumber(redis.call('HGET', rootKey, 'actual')) or 0
    for _, p in ipairs(BUDGET) do
      local line = watch[2] * p / 100
      if watch[1] < line and after >= line then
        registry.event(outbox, rootID, 'budget.threshold', now, tostring(p))
      end
    end
  end

  -- commit is the one versioned write: an optional checked status
  -- transition plus any fields, bumping the version.
  --
  -- keys[1] thread hash, keys[2] active set, keys[3] events channel,
  -- [keys[4] its shard's outbox]
  -- argv[1] thread id, argv[2] expected version ("0" = any), argv[3]
  -- target status ("" = unchanged), argv[4] now (RFC3339Nano), argv[5]
  -- transcript mark: segments ("" = unchanged), argv[6] the mark's chain
  -- hash, argv[7..] field/value pairs
  -- A target equal to the current status is no transition. A terminal
  -- target leaves the active set. A status change is published as "<id>
  -- <status>". The transcript mark only rises: one with no more segments
  -- than transcript_segments is ignored. The end of a root whose tree
  -- has webhooks (its record's webhooks field) is an event in the
  -- outbox (keys[4]), in this same step.
  -- Returns {new version}; refuses NOTFOUND, CONFLICT, TRANSITION.
  function registry.commit(keys, argv)
    local cur = redis.call('HMGET', keys[1], 'status', 'version', 'transcript_segments', 'webhooks', 'parent_id')
    if not cur[1] then return redis.error_reply('NOTFOUND ' .. argv[1]) end
    if argv[2] ~= '0' and argv[2] ~= cur[2] then return redis.error_reply('CONFLICT ' .. cur[2]) end
    local from, to = cur[1], argv[3]
    local changed = false
    if to ~= '' and to ~= from then
      if not (TRANS[from] and TRANS[from][to]) then return redis.error_reply('TRANSITION ' .. from .. ' ' .. to) end
      changed = true
    end
    -- One HSET: the fields, then what the registry owns (later pairs win).
    local set = {unpack(argv, 7)}
    local function add(k, v) set[#set + 1] = k; set[#set + 1] = v end
    if argv[5] ~= '' and tonumber(argv[5]) > tonumber(cur[3] or '0') then
      add('transcript_segments', argv[5])
      add('transcript_chain_hash', argv[6])
    end
    if changed then add('status', to) end
    local nv = (tonumber(cur[2]) or 0) + 1
    add('version', nv)
    add('updated_at', argv[4])
    redis.call('HSET', keys[1], unpack(set))
    if changed then
      if TERMINAL[to] then redis.call('SREM', keys[2], argv[1]) end
      redis.call('PUBLISH', keys[3], argv[1] .. ' ' .. to)
      if keys[4] and ENDS[to] and cur[4] == '1' and (not cur[5] or cur[5] == '') then
        registry.event(keys[4], argv[1], 'run.' .. to, argv[4], '')
      end
    end
    return {nv}
  end

  -- link links a continuation: old → new.
  --
  -- keys[1] old thread hash, keys[2] active set, keys[3] events channel,
  -- [keys[4] new thread hash]
  -- argv[1] old id, argv[2] new id, argv[3] now (RFC3339Nano)
  -- Old: continuation_thread_id = new; running (a handoff) or a finished
  -- status (completed, error, cancelled: a user resume) → continued,
  -- published, leaving the active set; created or waiting is a
  -- TRANSITION refusal. New (when keys[4] is given): continuation_of =
  -- old, chain_root_id = old's chain root, and previous_thread_id = old
  -- if unset. Old's version is bumped; new's only when the link writes to
  -- it (a continuation registered with these fields, as orchestrator.Start
  -- registers one, is not written to: a worker that claimed it meanwhile
  -- holds it still). Linking the same pair again changes nothing.
  -- Returns {old version, new version (0 without keys[4])}; refuses
  -- NOTFOUND, LINKED, TRANSITION.
  function registry.link(keys, argv)
    if argv[1] == argv[2] then return redis.error_reply('LINKED a thread cannot continue itself') end
    local o = redis.call('HMGET', keys[1], 'status', 'continuation_thread_id', 'chain_root_id', 'version')
    if not o[1] then return redis.error_reply('NOTFOUND ' .. argv[1]) end
    local n
    if keys[4] then
      n = redis.call('HMGET', keys[4], 'status', 'continuation_of', 'continuation_thread_id', 'version',
        'chain_root_id', 'previous_thread_id')
      if not n[1] then return redis.error_reply('NOTFOUND ' .. argv[2]) end
    end
    if o[2] and o[2] ~= '' then
      if o[2] ~= argv[2] then return redis.error_reply('LINKED ' .. argv[1] .. ' already continues as ' .. o[2]) end
      if not n or n[2] == argv[1] then return {tonumber(o[4]), n and tonumber(n[4]) or 0} end
    end
    if n then
      if n[2] and n[2] ~= '' and n[2] ~= argv[1] then
        return redis.error_reply('LINKED ' .. argv[2] .. ' already continues ' .. n[2])
      end
      if n[3] and n[3] ~= '' then return redis.error_reply('LINKED ' .. argv[2] .. ' already has a continuation ' .. n[3]) end
    end
    local from, to = o[1], 'continued'
    if from ~= 'running' and not TERMINAL[from] then return redis.error_reply('TRANSITION ' .. from .. ' continued') end
    redis.call('HSET', keys[1], 'continuation_thread_id', argv[2], 'status', to, 'updated_at', argv[3])
    local ov = redis.call('HINCRBY', keys[1], 'version', 1)
    if to ~= from then
      redis.call('SREM', keys[2], argv[1])
      redis.call('PUBLISH', keys[3], argv[1] .. ' ' .. to)
    end
    local nv = 0
    if n then
      local root = o[3]
      if not root or root == '' then root = argv[1] end
      local set = {}
      if n[2] ~= argv[1] then set[#set + 1] = 'continuation_of'; set[#set + 1] = argv[1] end
      if n[5] ~= root then set[#set + 1] = 'chain_root_id'; set[#set + 1] = root end
      if not n[6] or n[6] == '' then set[#set + 1] = 'previous_thread_id'; set[#set + 1] = argv[1] end
      if #set > 0 then
        set[#set + 1] = 'updated_at'; set[#set + 1] = argv[3]
        redis.call('HSET', keys[4], unpack(set))
        nv = redis.call('HINCRBY', keys[4], 'version', 1)
      else
        nv = tonumber(n[4])
      end
    end
    return {ov, nv}
  end

  -- forget deletes what Redis holds of one finished thread.
  --
  -- keys[1] thread hash, keys[2] its shard's threads index, keys[3]
  -- active set, keys[4] awaiting-approval set, keys[5] its tenant's
  -- threads index, keys[6..] the thread's own keys (ledger entry,
  -- children, forks, spawns, cancel flag, waits, decisions, inbox,
  -- lease, chain waiters, messages, message ids), then its directive's and tags' threads
  -- indexes (the last argv[3] keys)
  -- argv[1] thread id, argv[2] the version the caller read, argv[3] how
  -- many tag indexes end keys ("0" or absent: none)
  -- Returns {1}; refuses NOTFOUND, CONFLICT (the record changed since it
  -- was read: a resume linked it, say), TRANSITION <status> forgotten
  -- (it is not finished).
  function registry.forget(keys, argv)
    local cur = redis.call('HMGET', keys[1], 'status', 'version')
    if not cur[1] then return redis.error_reply('NOTFOUND ' .. argv[1]) end
    if cur[2] ~= argv[2] then return redis.error_reply('CONFLICT ' .. cur[2]) end
    if not TERMINAL[cur[1]] then return redis.error_reply('TRANSITION ' .. cur[1] .. ' forgotten') end
    redis.call('ZREM', keys[2], argv[1])
    redis.call('SREM', keys[3], argv[1])
    redis.call('SREM', keys[4], argv[1])
    redis.call('ZREM', keys[5], argv[1])
    local last = #keys - (tonumber(argv[3]) or 0)
    for i = last + 1, #keys do redis.call('ZREM', keys[i], argv[1]) end
    local own = {keys[1]}
    for i = 6, last do own[#own + 1] = keys[i] end
    redis.call('DEL', unpack(own))
    return {1}
  end
end
