-- ledger.lua: the budget ledger's operations (package ledger) as Lua
-- functions of one table, ledger. The ledger's own scripts are this file
-- and one line that calls one function with KEYS and ARGV (ledger.go);
-- the compound scripts of package orchestrator (start.lua, finalize.lua)
-- call them with slices of theirs.
--
-- Every function but register takes an entry and its ancestors' entries:
--
--   keys[1]       the entry the operation is about
--   keys[2..n]    its ancestors' entries, parent first, up to the root's
--   argv[1..n]    the ledger ids of keys[1..n], in the same order
--   argv[n+1..]   the operation's own arguments
--
-- and checks that the ids form the entry's path as the entries record it
-- (each one's parent_id is the next id, the last is a root), so a caller
-- can never charge or release along a path that is not the tree's.
--
-- Replies (package reply: a table, or a refusal): an entry's fields are
-- parent_id, max, reserved, actual, own, overrun, status, g (Go's
-- entryFields), amounts as integers; a level (the limiter) is id, max,
-- actual, reserved. Refusals, each before anything is written:
--
--   NOENTRY <id>        the entry, or its parent, has no ledger entry
--   ENTRYEXISTS <parent>  the entry exists with other terms (another max
--                       for a root, another parent for a child)
--   RELEASED <status>   the entry (or a new entry's parent) is released
--   INSUFFICIENT <room> <max> <actual> <reserved> <id>
--                       no room: the room left, and the level that has it
--   PATH <message>      the ids are not the entry's path
--
-- Amounts go to redis.call as Lua numbers, which Redis renders with
-- %.17g: exact integers below 2^53, far above MaxAmount in nano-USD; in a
-- refusal they are written with %d. Each entry is read with one HMGET and
-- written with one HSET.

local ledger = {}
do
  local function num(v) return tonumber(v) or 0 end

  local function refuse(...) return redis.error_reply(table.concat({...}, ' ')) end

  -- level reads the path entry keys[i] (ledger id argv[i]); nil when it
  -- does not exist.
  local function level(keys, argv, i)
    local e = redis.call('HMGET', keys[i], 'parent_id', 'max', 'reserved', 'actual', 'status', 'g')
    if not e[5] then return nil end
    return {parent = e[1] or '', max = num(e[2]), res = num(e[3]), act = num(e[4]),
      status = e[5], g = e[6] == '1', id = argv[i], key = keys[i]}
  end

  -- ancestors reads keys[2..n] into lv[2..n] and checks that lv[1..n] is
  -- one path up to a root. Returns nil and a refusal otherwise.
  local function ancestors(keys, argv, lv)
    for i = 2, #keys do
      local l = level(keys, argv, i)
      if not l then
        if i == 2 then return nil, refuse('NOENTRY', argv[2]) end
        return nil, refuse('PATH ancestor', argv[i], 'has no ledger entry')
      end
      lv[i] = l
    end
    for i = 1, #keys do
      local want = argv[i + 1]
      if i == #keys then want = '' end
      if lv[i] and lv[i].parent ~= want then
        if want == '' then
          return nil, refuse('PATH the path stops at', argv[i] .. ', whose parent is', lv[i].parent)
        end
        return nil, refuse('PATH the path gives', argv[i], 'the parent', want .. ', the ledger', lv[i].parent)
      end
    end
    return lv
  end

  -- region is the last level of the region that starts at level from: the
  -- first level up from it that is an active guaranteed entry (whose own
  -- reservation covers everything above), else the root.
  local function region(keys, lv, from)
    for j = from, #keys do
      if lv[j].g and lv[j].status == 'active' then return j end
    end
    return #keys
  end

  -- room is what a level can still take: max - actual - reserved, not below 0.
  local function room(l)
    local r = l.max - l.res - l.act
    if r < 0 then r = 0 end
    return r
  end

  -- smallest is the smallest room over lv[from..to] and the (lowest) level
  -- that has it.
  local function smallest(lv, from, to)
    local best, at = nil, from
    for j = from, to do
      local r = room(lv[j])
      if best == nil or r < best then best, at = r, j end
    end
    return best or 0, at
  end

  -- limiter is the reply tail naming a level: id, max, actual, reserved.
  local function limiter(l)
    return l.id, l.max, l.act, l.res
  end

  -- insufficient is the refusal for a room r that level l has.
  local function insufficient(r, l)
    return redis.error_reply(string.format('INSUFFICIENT %d %d %d %d %s', r, l.max, l.act, l.res, l.id))
  end

  local function flag(b)
    if b then return '1' end
    return '0'
  end

  -- register creates a root entry.
  --
  -- keys[1] the root's entry; argv[1] max (nano-USD): no path, no ids
  -- Returns the entry's fields (also when it exists with the same max and
  -- no parent); refuses ENTRYEXISTS otherwise.
  function ledger.register(keys, argv)
    local e = redis.call('HMGET', keys[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
    if e[7] then
      if (e[1] or '') ~= '' or e[2] ~= argv[1] then return refuse('ENTRYEXISTS', e[1] or '') end
      return {e[1], num(e[2]), num(e[3]), num(e[4]), num(e[5]), num(e[6]), e[7], e[8] or '0'}
    end
    redis.call('HSET', keys[1], 'parent_id', '', 'max', argv[1], 'reserved', 0, 'actual', 0,
      'own', 0, 'overrun', 0, 'status', 'active', 'g', 0)
    return {'', num(argv[1]), 0, 0, 0, 0, 'active', '0'}
  end

  -- room reads what an entry's subtree may still spend: the smallest room
  -- over the region that starts at keys[1] (read only).
  --
  -- keys, argv[1..n] the entry and its ancestors
  -- Returns {status of keys[1], room, limiter id, its max, actual,
  -- reserved}; refuses NOENTRY, PATH.
  function ledger.room(keys, argv)
    local first = level(keys, argv, 1)
    if not first then return refuse('NOENTRY', argv[1]) end
    local lv, err = ancestors(keys, argv, {first})
    if not lv then return err end
    local r, at = smallest(lv, 1, region(keys, lv, 1))
    return {first.status, r, limiter(lv[at])}
  end

  -- admit admits a thread's entry under its parent without setting money
  -- aside (the default): a new entry is created while the region above it
  -- has room; an existing one of the same parent is left as it is (a
  -- handoff's continuation shares its chain's entry) or, with reopen,
  -- reopened when released (a resume), as an admitted entry.
  --
  -- keys, argv[1..n] the entry and its ancestors
  -- argv[n+1] max of a new entry (nano-USD)
  -- argv[n+2] "1": reopen a released entry
  -- Returns {fields..., left} with left the smallest room the entry now
  -- has over its region; refuses ENTRYEXISTS (an entry of another
  -- parent), RELEASED (the parent of a new entry, or the entry without
  -- reopen), INSUFFICIENT (nothing left), NOENTRY (the parent), PATH.
  function ledger.admit(keys, argv)
    local n = #keys
    local e = redis.call('HMGET', keys[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
    local lv, err = ancestors(keys, argv, {})
    if not lv then return err end
    local parent = ''
    if n > 1 then parent = argv[2] end
    if e[7] then
      if (e[1] or '') ~= parent then return refuse('ENTRYEXISTS', e[1] or '') end
      local self = {parent = parent, max = num(e[2]), res = num(e[3]), act = num(e[4]), status = 'active',
        g = e[8] == '1', id = argv[1], key = keys[1]}
      local reopen = e[7] ~= 'active'
      if reopen then
        if argv[n + 2] ~= '1' then return refuse('RELEASED', e[7]) end
        self.g = false
      end
      lv[1] = self
      local r, at = smallest(lv, 1, region(keys, lv, 1))
      if reopen then
        if r <= 0 then return insufficient(r, lv[at]) end
        redis.call('HSET', keys[1], 'status', 'active', 'g', 0)
      end
      return {parent, self.max, self.res, self.act, num(e[5]), num(e[6]), 'active', flag(self.g), r}
    end
    if n < 2 then return refuse('NOENTRY', '') end
    if lv[2].status ~= 'active' then return refuse('RELEASED', lv[2].status) end
    local r, at = smallest(lv, 2, region(keys, lv, 2))
    if r <= 0 then return insufficient(r, lv[at]) end
    local max = num(argv[n + 1])
    redis.call('HSET', keys[1], 'parent_id', parent, 'max', max, 'reserved', 0, 'actual', 0,
      'own', 0, 'overrun', 0, 'status', 'active', 'g', 0)
    if max < r then r = max end
    return {parent, max, 0, 0, 0, 0, 'active', '0', r}
  end

  -- restore creates again the entry of a thread that Redis lost (its
  -- writes since the entry was made went with it) and that the blob
  -- store restores (package orchestrator's restore.lua): an admitted
  -- entry under the path, with nothing spent, whatever room the levels
  -- above have now and whether or not its parent is released, because
  -- the thread ran; its recorded turns are charged after, each under its
  -- key. An existing entry of the same parent is left as it is.
  --
  -- keys, argv[1..n] the entry and its ancestors
  -- argv[n+1] max (nano-USD)
  -- Returns the entry's fields; refuses ENTRYEXISTS (an entry of another
  -- parent), NOENTRY (the parent), PATH.
  function ledger.restore(keys, argv)
    local n = #keys
    local e = redis.call('HMGET', keys[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
    local parent = ''
    if n > 1 then parent = argv[2] end
    if e[7] then
      if (e[1] or '') ~= parent then return refuse('ENTRYEXISTS', e[1] or '') end
      return {e[1] or '', num(e[2]), num(e[3]), num(e[4]), num(e[5]), num(e[6]), e[7], e[8] or '0'}
    end
    local lv, err = ancestors(keys, argv, {})
    if not lv then return err end
    local max = num(argv[n + 1])
    redis.call('HSET', keys[1], 'parent_id', parent, 'max', max, 'reserved', 0, 'actual', 0,
      'own', 0, 'overrun', 0, 'status', 'active', 'g', 0)
    return {parent, max, 0, 0, 0, 0, 'active', '0'}
  end

  -- reserve creates a guaranteed entry: amount is set aside for it in
  -- every level of the region above it (its parent's up to the first
  -- active guaranteed ancestor or the root), or nothing changes.
  --
  -- keys, argv[1..n] the new entry and its ancestors
  -- argv[n+1] amount (nano-USD)
  -- Returns the entry's fields (an existing entry of the same parent is
  -- returned unchanged); refuses ENTRYEXISTS, NOENTRY (the parent),
  -- RELEASED (the parent), INSUFFICIENT, PATH.
  function ledger.reserve(keys, argv)
    local n = #keys
    local c = redis.call('HMGET', keys[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
    if n < 2 then return refuse('NOENTRY', '') end
    if c[7] then
      if c[1] ~= argv[2] then return refuse('ENTRYEXISTS', c[1] or '') end
      return {c[1], num(c[2]), num(c[3]), num(c[4]), num(c[5]), num(c[6]), c[7], c[8] or '0'}
    end
    local lv, err = ancestors(keys, argv, {})
    if not lv then return err end
    if lv[2].status ~= 'active' then return refuse('RELEASED', lv[2].status) end
    local amt = num(argv[n + 1])
    local last = region(keys, lv, 2)
    local r, at = smallest(lv, 2, last)
    if amt > r then return insufficient(r, lv[at]) end
    for j = 2, last do
      redis.call('HSET', lv[j].key, 'reserved', lv[j].res + amt)
    end
    redis.call('HSET', keys[1], 'parent_id', argv[2], 'max', amt, 'reserved', 0, 'actual', 0,
      'own', 0, 'overrun', 0, 'status', 'active', 'g', 1)
    return {argv[2], amt, 0, 0, 0, 0, 'active', '1'}
  end

  -- charge adds spend to an entry and to every ancestor at once, once per
  -- idempotency key, clamped to the smallest room over the entry's region
  -- (the levels whose ceilings the charge is not yet covered by a
  -- reservation under); the part that does not fit goes to the entry's
  -- overrun. Above the region the charge is spent out of the reservation
  -- the region's top level holds there (reserved → actual). The outcome
  -- of each key is kept in the entry's own hash, in the field
  -- "charge:<key>": "ok", or "over:<id of the level that did not have
  -- room>".
  --
  -- keys, argv[1..n] the entry and its ancestors
  -- argv[n+1] idempotency key ("" = none: ReportActual's absolute mode)
  -- argv[n+2] amount (nano-USD); with argv[n+3] == "abs", the absolute
  --           total of own + overrun the thread has spent, of which only
  --           the part not yet recorded is charged
  -- argv[n+3] "add" | "abs"
  -- Returns {over (1: clamped, else 0), fields..., left, limiter id, max,
  -- actual, reserved} with left the smallest room over the region after
  -- the charge and the limiter the level that has it (clamped: the level
  -- that did not have room); refuses NOENTRY, RELEASED, PATH.
  function ledger.charge(keys, argv)
    local n = #keys
    local key, mode = argv[n + 1], argv[n + 3]
    local ck = 'charge:' .. key
    local t = redis.call('HMGET', keys[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g', ck)
    if not t[7] then return refuse('NOENTRY', argv[1]) end
    local self = {parent = t[1] or '', max = num(t[2]), res = num(t[3]), act = num(t[4]), status = t[7],
      g = t[8] == '1', id = argv[1], key = keys[1]}
    local lv, err = ancestors(keys, argv, {self})
    if not lv then return err end
    local own, over = num(t[5]), num(t[6])
    local last = region(keys, lv, 1)
    local function reply(clamped, at, left)
      return {clamped, self.parent, self.max, self.res, self.act, own, over, self.status, flag(self.g), left, limiter(lv[at])}
    end
    if key ~= '' and t[9] then
      local r, at = smallest(lv, 1, last)
      if string.sub(t[9], 1, 5) == 'over:' then
        local who = string.sub(t[9], 6)
        for j = 1, n do
          if lv[j].id == who then at = j end
        end
        return reply(1, at, r)
      end
      return reply(0, at, r)
    end
    if t[7] ~= 'active' then return refuse('RELEASED', t[7]) end
    local amt = num(argv[n + 2])
    if mode == 'abs' then
      amt = amt - own - over
      if amt < 0 then amt = 0 end
    end
    local r, at = smallest(lv, 1, last)
    local applied, extra = amt, 0
    if amt > r then applied, extra = r, amt - r end
    for j = 2, n do
      local l = lv[j]
      l.act = l.act + applied
      if j > last then
        l.res = l.res - applied
        redis.call('HSET', l.key, 'actual', l.act, 'reserved', l.res)
      else
        redis.call('HSET', l.key, 'actual', l.act)
      end
    end
    self.act, own, over = self.act + applied, own + applied, over + extra
    local clamped, stored = 0, 'ok'
    if extra > 0 then clamped, stored = 1, 'over:' .. lv[at].id end
    if key ~= '' then
      redis.call('HSET', keys[1], 'actual', self.act, 'own', own, 'overrun', over, ck, stored)
    else
      redis.call('HSET', keys[1], 'actual', self.act, 'own', own, 'overrun', over)
    end
    return reply(clamped, at, r - applied)
  end

  -- release marks an entry final. A guaranteed entry gives back what is
  -- left of its reservation (max − actual − reserved: what it neither
  -- spent nor set aside for guaranteed descendants) to every level of the
  -- region above it; an admitted entry holds nothing, so only its status
  -- changes (its spend is already in every ancestor). Releasing again
  -- changes nothing.
  --
  -- keys, argv[1..n] the entry and its ancestors
  -- argv[n+1] final status (not "active")
  -- Returns the entry's fields (the status it had before, when it was
  -- released before); refuses NOENTRY, PATH.
  function ledger.release(keys, argv)
    local n = #keys
    local e = redis.call('HMGET', keys[1], 'parent_id', 'max', 'reserved', 'actual', 'own', 'overrun', 'status', 'g')
    if not e[7] then return refuse('NOENTRY', argv[1]) end
    local max, res, act = num(e[2]), num(e[3]), num(e[4])
    local fields = {e[1], max, res, act, num(e[5]), num(e[6]), e[7], e[8] or '0'}
    if e[7] ~= 'active' then return fields end
    if e[8] == '1' then
      local give = max - act - res
      if give > 0 and n > 1 then
        local self = {parent = e[1] or '', max = max, res = res, act = act, status = 'active', g = true, id = argv[1], key = keys[1]}
        local lv, err = ancestors(keys, argv, {self})
        if not lv then return err end
        for j = 2, region(keys, lv, 2) do
          redis.call('HSET', lv[j].key, 'reserved', lv[j].res - give)
        end
      end
    end
    redis.call('HSET', keys[1], 'status', argv[n + 1])
    fields[7] = argv[n + 1]
    return fields
  end
end
