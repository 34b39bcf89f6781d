-- admission.lua is the library of admission's tenant scripts: every
-- function here works on one tenant's keys, which share one Cluster slot,
-- so a script made of them is atomic for the tenant. It is the prelude of
-- adm_*.lua.
--
-- The tenant's keys (adm.keys names them from KEYS, in this order):
--   conf    hash  the published settings: pv (policy version), max_running,
--                 grant_ttl (ms), share_ttl (ms), rule:<name> (a key's max)
--   over    hash  overrides of conf's fields (spool tenant set)
--   state   hash  admitted (granted + running), running, share, share_at,
--                 share_capped (1: the pass gave all the tenant asked for),
--                 ov ('0': no overrides, which calls then do not read),
--                 arrival, gen, fence_until, active, counters n:<where>:<queue>,
--                 totals grants, released, reaped:<state>, fenced, unreplicated,
--                 the wait histogram wh:<reason>:<bucket>, ws:<reason>, wc:<reason>
--   acts    hash  activation → its record (JSON, adm.decode)
--   leases  zset  granted or running activation → lease expiry (ms)
--   ready   zset  activation → (priority·2 + class)·2^44 + arrival
--   kheld   hash  RULE=VALUE → slots held
--   kwait   hash  RULE=VALUE → activations in its key queue
--   kq      zset  every key queue, score 0, member RULE=VALUE|<score, 16 hex>|<activation>
--   bq      zset  ceiling waiters, member REASON|<score, 16 hex>|<activation>
--   roots   set   root chains in flight          (tenant ceilings)
--   spend   hash  spend windows                   (tenant ceilings)
--   lapsed  hash  reaped running activation → {run, aw, al, t}: its
--                 allowance, held until settled   (tenant ceilings)
--
-- An activation's record: run, root (its root chain), q (queue), p
-- (priority), c (class: 0 a tree already started, 1 a root chain's first),
-- k (its keys RULE=VALUE) and m (their maxes when requested), r and s (the
-- task's reason and sequence number), st (ready | key | blocked | granted |
-- running), why (what it waits for), wk (the key it waits on), ar (its
-- arrival: the ready score is (p·2 + c)·2^44 + ar; 0 puts a grant that
-- expired at the head of its class), rq (requested at, ms), e (how often a worker took its task and
-- parked it: the next task's id suffix), g (the generation of its grant),
-- w (the token of the activation holding it), ga (granted at, ms).
--
-- Every function returns nothing or a value; none refuses (the scripts
-- decide what is refused before they call them).

local adm = {}
do
  local SPAN = 17592186044416 -- 2^44: the arrival part of a ready score
  local REAP_MAX, EXAMINE_MAX = 64, 64
  -- The wait histogram's upper bounds (seconds); the last bucket is +Inf.
  local BUCKETS = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600}
  adm.NKEYS = 13

  -- keys names the tenant's 13 keys from KEYS[i..i+12].
  function adm.keys(KEYS, i)
    return {conf = KEYS[i], over = KEYS[i + 1], state = KEYS[i + 2], acts = KEYS[i + 3], leases = KEYS[i + 4],
      ready = KEYS[i + 5], kheld = KEYS[i + 6], kwait = KEYS[i + 7], kq = KEYS[i + 8], bq = KEYS[i + 9],
      roots = KEYS[i + 10], spend = KEYS[i + 11], lapsed = KEYS[i + 12]}
  end

  local function num(v, d)
    local n = tonumber(v)
    if n == nil then return d end
    return n
  end

  -- FIELDS are the settings a tenant script reads (settings).
  local FIELDS = {'max_running', 'grant_ttl', 'share_ttl', 'runs_in_flight', 'starts_per_minute', 'on_exhausted',
    'spend_per_day', 'spend_per_month', 'spend_grant'}

  -- settings are the tenant's settings of FIELDS: each its override,
  -- else the published value; a field neither sets is absent. The
  -- published settings are first brought up to the caller's (sync: pv,
  -- conf) in the same read. The overrides are read only while the
  -- tenant may have some (ov, the state's flag: '0' when it has none;
  -- absent, as for a tenant kept from before the flag, means look, and
  -- the look sets it).
  local function settings(K, pv, conf, ov)
    local c = redis.call('HMGET', K.conf, 'pv', unpack(FIELDS))
    if pv > 0 and conf ~= '' and pv > num(c[1], 0) then
      adm.sync(K, pv, conf)
      c = redis.call('HMGET', K.conf, 'pv', unpack(FIELDS))
    end
    local o = {}
    if ov ~= '0' then
      o = redis.call('HMGET', K.over, unpack(FIELDS))
      if not ov then redis.call('HSET', K.state, 'ov', redis.call('HLEN', K.over) > 0 and '1' or '0') end
    end
    local s = {}
    for i, f in ipairs(FIELDS) do
      local v = o[i]
      if not v or v == '' then v = c[i + 1] end
      if v and v ~= '' then s[f] = v end
    end
    return s
  end

  -- nanos is USD text v in nano-dollars; nil when v is not a number.
  local function nanos(v)
    local n = tonumber(v)
    if n == nil then return nil end
    return math.floor(n * 1e9 + 0.5)
  end

  -- civil is the UTC date (year, month, day) of days since 1970-01-01,
  -- and daysof its inverse (H. Hinnant's algorithms): a script has no
  -- clock and no date library, and a window is a UTC day or month of the
  -- call's time.
  local function civil(days)
    local z = days + 719468
    local era = math.floor(z / 146097)
    local doe = z - era * 146097
    local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524) - math.floor(doe / 146096)) / 365)
    local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
    local mp = math.floor((5 * doy + 2) / 153)
    local d = doy - math.floor((153 * mp + 2) / 5) + 1
    local m = mp < 10 and mp + 3 or mp - 9
    local y = yoe + era * 400
    if m <= 2 then y = y + 1 end
    return y, m, d
  end

  local function daysof(y, m, d)
    if m <= 2 then y = y - 1 end
    local era = math.floor(y / 400)
    local yoe = y - era * 400
    local doy = math.floor((153 * ((m + 9) % 12) + 2) / 5) + d - 1
    return era * 146097 + yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy - 719468
  end

  -- windows are the spend windows of time now (ms): the UTC day
  -- (d:YYYY-MM-DD) and month (m:YYYY-MM), each with its limit (nano, nil:
  -- none) and when it ends (ms).
  local function windows(now, day, month)
    local days = math.floor(now / 86400000)
    local y, m, d = civil(days)
    local ny, nm = y, m + 1
    if nm > 12 then ny, nm = y + 1, 1 end
    return {{name = string.format('d:%04d-%02d-%02d', y, m, d), limit = day, reset = (days + 1) * 86400000},
      {name = string.format('m:%04d-%02d', y, m), limit = month, reset = daysof(ny, nm, 1) * 86400000}}
  end
  adm.windows = windows

  -- sync writes the caller's view of the published settings (conf, a JSON
  -- object of field → value, at policy version pv) when it is newer than
  -- the tenant's: a process that read a newer policy brings every tenant
  -- it touches up to it.
  function adm.sync(K, pv, conf)
    if pv <= 0 or conf == '' then return end
    if pv <= num(redis.call('HGET', K.conf, 'pv'), 0) then return end
    local flat = {'pv', pv}
    for f, v in pairs(cjson.decode(conf)) do
      flat[#flat + 1] = f
      flat[#flat + 1] = tostring(v)
    end
    redis.call('DEL', K.conf)
    redis.call('HSET', K.conf, unpack(flat))
  end

  -- open is the context of one call: the keys, the time (ms), the
  -- tenant's limits and counts, and what the call granted and freed. prov
  -- is the caller's provisional share (package doc, "Shares"), used
  -- while no balancer pass wrote a share that is still fresh; pv and
  -- conf, when given, the caller's published settings (sync).
  function adm.open(K, now, prov, pv, conf)
    local s = redis.call('HMGET', K.state, 'share', 'share_at', 'admitted', 'gen', 'fence_until', 'running', 'gcra', 'share_capped', 'ov')
    local T = {K = K, now = now, admitted = num(s[3], 0), running = num(s[6], 0), gen = num(s[4], 0),
      fence = num(s[5], 0), tat = num(s[7], 0), grants = {}, maxes = {}, ngrants = 0, retry = 0}
    local set = settings(K, pv or 0, conf or '', s[9])
    T.maxrun = num(set.max_running, nil)
    T.ttl = num(set.grant_ttl, 60000)
    T.runs = num(set.runs_in_flight, nil)
    T.rate = num(set.starts_per_minute, nil)
    T.refuse = set.on_exhausted == 'refuse'
    T.sgrant = nanos(set.spend_grant) or 100000000
    T.dlim, T.mlim = nanos(set.spend_per_day), nanos(set.spend_per_month)
    T.spending = T.dlim ~= nil or T.mlim ~= nil
    T.wins = windows(now, T.dlim, T.mlim)
    local fresh = num(set.share_ttl, 3000)
    T.share = num(prov, 1)
    if s[1] and now - num(s[2], 0) <= fresh then
      -- The pass's share, unless it was all the tenant asked for then
      -- (share_capped): its demand may have grown since, up to the
      -- provisional share, until the next pass.
      if s[8] == '1' then T.share = math.max(num(s[1], T.share), T.share) else T.share = num(s[1], T.share) end
    end
    return T
  end

  function adm.decode(raw) return cjson.decode(raw) end

  local function save(T, a, r) redis.call('HSET', T.K.acts, a, cjson.encode(r)) end

  -- where is the counter of an activation in state st: n:<where>:<queue>.
  local function where(r)
    if r.st == 'key' then return 'n:blocked:concurrency:' .. r.q end
    if r.st == 'blocked' then return 'n:blocked:' .. r.why .. ':' .. r.q end
    return 'n:' .. r.st .. ':' .. r.q
  end

  local function count(T, r, d) redis.call('HINCRBY', T.K.state, where(r), d) end

  local function hex(score) return string.format('%016x', score) end

  -- score is r's ready score: (priority·2 + class)·2^44 + arrival. Kept
  -- as its parts (cjson writes numbers with 14 digits).
  local function score(r) return (r.p * 2 + r.c) * SPAN + r.ar end
  adm.score = score

  -- rule is the rule name of key k (RULE=VALUE).
  local function rule(k) return string.match(k, '^([^=]*)=') or k end

  -- max is key i of r's max: the published rule's, else the one it was
  -- requested with.
  local function max(T, r, i)
    local name = rule(r.k[i])
    local m = T.maxes[name]
    if m == nil then
      m = num(redis.call('HGET', T.K.conf, 'rule:' .. name), false)
      T.maxes[name] = m
    end
    if m then return m end
    return num(r.m and r.m[i], 1)
  end

  -- fullkey is the first of r's keys without a free slot; nil when each
  -- has one.
  function adm.fullkey(T, r)
    for i, k in ipairs(r.k or {}) do
      if num(redis.call('HGET', T.K.kheld, k), 0) >= max(T, r, i) then return k end
    end
    return nil
  end

  -- toready puts a into the ready queue.
  function adm.toready(T, a, r)
    r.st, r.wk = 'ready', nil
    redis.call('ZADD', T.K.ready, score(r), a)
    count(T, r, 1)
    save(T, a, r)
  end

  -- tokey puts a into key k's queue.
  function adm.tokey(T, a, r, k)
    r.st, r.why, r.wk = 'key', 'concurrency', k
    redis.call('ZADD', T.K.kq, 0, k .. '|' .. hex(score(r)) .. '|' .. a)
    redis.call('HINCRBY', T.K.kwait, k, 1)
    count(T, r, 1)
    save(T, a, r)
  end

  -- unqueue takes a parked a out of the queue it is in (ready, a key's,
  -- a ceiling's).
  local function unqueue(T, a, r)
    count(T, r, -1)
    if r.st == 'ready' then
      redis.call('ZREM', T.K.ready, a)
    elseif r.st == 'key' then
      redis.call('ZREM', T.K.kq, r.wk .. '|' .. hex(score(r)) .. '|' .. a)
      if redis.call('HINCRBY', T.K.kwait, r.wk, -1) <= 0 then redis.call('HDEL', T.K.kwait, r.wk) end
    elseif r.st == 'blocked' then
      redis.call('ZREM', T.K.bq, r.why .. '|' .. hex(score(r)) .. '|' .. a)
    end
  end
  adm.unqueue = unqueue

  -- readyagain moves parked a from its queue to the ready queue; false
  -- when a has no record (the queue's member is stale).
  local function readyagain(T, a)
    local raw = redis.call('HGET', T.K.acts, a)
    if not raw then return false end
    local r = cjson.decode(raw)
    unqueue(T, a, r)
    adm.toready(T, a, r)
    return true
  end

  -- wakekey moves up to n first waiters of key k to the ready queue.
  local function wakekey(T, k, n)
    if n <= 0 then return end
    local ms = redis.call('ZRANGEBYLEX', T.K.kq, '[' .. k .. '|', '(' .. k .. '|\255', 'LIMIT', 0, n)
    for _, m in ipairs(ms) do
      if not readyagain(T, string.sub(m, #k + 19)) then
        redis.call('ZREM', T.K.kq, m)
        if redis.call('HINCRBY', T.K.kwait, k, -1) <= 0 then redis.call('HDEL', T.K.kwait, k) end
      end
    end
  end

  -- unhold ends the grant of a (granted or running): its key slots free,
  -- each freed key's first waiter to the ready queue, the counts down.
  function adm.unhold(T, a, r)
    for _, k in ipairs(r.k or {}) do
      if redis.call('HINCRBY', T.K.kheld, k, -1) <= 0 then redis.call('HDEL', T.K.kheld, k) end
      if redis.call('HEXISTS', T.K.kwait, k) == 1 then wakekey(T, k, 1) end
    end
    redis.call('ZREM', T.K.leases, a)
    count(T, r, -1)
    T.admitted = redis.call('HINCRBY', T.K.state, 'admitted', -1)
    if r.st == 'running' then T.running = redis.call('HINCRBY', T.K.state, 'running', -1) end
  end

  -- hold takes a's key slots and counts it admitted (not yet counted in
  -- any state).
  local function hold(T, a, r)
    for _, k in ipairs(r.k or {}) do redis.call('HINCRBY', T.K.kheld, k, 1) end
    T.admitted = redis.call('HINCRBY', T.K.state, 'admitted', 1)
  end

  -- observe counts a wait of secs seconds for reason in the histogram.
  local function observe(T, reason, secs)
    local b = #BUCKETS + 1
    for i, le in ipairs(BUCKETS) do
      if secs <= le then
        b = i
        break
      end
    end
    redis.call('HINCRBY', T.K.state, 'wh:' .. reason .. ':' .. b, 1)
    redis.call('HINCRBYFLOAT', T.K.state, 'ws:' .. reason, secs)
  end

  -- grant grants ready activation a: its key slots, a lease of the grant
  -- TTL, the generation of this call (bumped at its first grant).
  function adm.grant(T, a, r)
    if T.ngrants == 0 then T.gen = redis.call('HINCRBY', T.K.state, 'gen', 1) end
    unqueue(T, a, r)
    hold(T, a, r)
    observe(T, r.why or 'capacity', (T.now - (r.rq or T.now)) / 1000)
    r.st, r.g, r.ga, r.wk = 'granted', T.gen, T.now, nil
    redis.call('ZADD', T.K.leases, T.now + T.ttl, a)
    redis.call('HINCRBY', T.K.state, 'grants', 1)
    count(T, r, 1)
    local enc = cjson.encode(r)
    redis.call('HSET', T.K.acts, a, enc)
    T.ngrants = T.ngrants + 1
    T.grants[#T.grants + 1] = a
    T.grants[#T.grants + 1] = enc
  end

  -- limit is how many activations the tenant may have admitted now.
  local function limit(T)
    if T.maxrun and T.maxrun < T.share then return T.maxrun end
    return T.share
  end
  adm.limit = limit

  -- Tenant ceilings (9). A root chain's first activation (class 1, its
  -- chain not yet in roots) meets runs_in_flight and starts_per_minute;
  -- every grant meets the spend windows' room. One that meets a ceiling
  -- waits in the ceiling queue (bq, state blocked, why its reason) until
  -- a pump or an end that makes room moves it back to the ready queue;
  -- T.retry is the earliest time room will next exist for a rate or
  -- spend wait the call made, for the caller to schedule a pump then.

  -- chainof is the root chain of r (its own run for a root's first).
  local function chainof(r)
    if r.root and r.root ~= '' then return r.root end
    return r.run
  end

  -- first reports whether r starts a root chain not yet in flight.
  local function first(T, r)
    return r.c == 1 and redis.call('SISMEMBER', T.K.roots, chainof(r)) == 0
  end

  -- limitof is the limit (nano) of window name w: the day's or the month's.
  local function limitof(T, w)
    if string.sub(w, 1, 2) == 'd:' then return T.dlim end
    return T.mlim
  end

  -- spendroom is the least room (limit − spent − held, nano) over the
  -- windows named (those of now when nil) that have a limit, nil when
  -- none has one, and the time the last of the full ones ends (ms).
  local function spendroom(T, names)
    if not T.spending then return nil, 0 end
    -- The windows with a limit, read in one HMGET.
    local ws, fields = {}, {}
    for _, w in ipairs(T.wins) do
      local name = w.name
      if names then name = names[w.name:sub(1, 1) == 'd' and 1 or 2] end
      local lim = limitof(T, name)
      if lim and name then
        ws[#ws + 1] = {name = name, lim = lim, w = w}
        fields[#fields + 1] = name .. ':spent'
        fields[#fields + 1] = name .. ':held'
      end
    end
    if #ws == 0 then return nil, 0 end
    local v = redis.call('HMGET', T.K.spend, unpack(fields))
    local room, reset = nil, 0
    for i, x in ipairs(ws) do
      local r = x.lim - num(v[2 * i - 1], 0) - num(v[2 * i], 0)
      if room == nil or r < room then room = r end
      if r <= 0 and x.name == x.w.name and x.w.reset > reset then reset = x.w.reset end
    end
    return room, reset
  end
  adm.spendroom = spendroom

  -- gcra is the tenant's starts-per-minute state: the emission period
  -- (ms), and how many starts it admits now (0: none before wait ms).
  local function gcra(T)
    local period = 60000 / T.rate
    local ahead = math.max(T.tat, T.now) - T.now
    local n = math.floor(((T.rate - 1) * period - ahead) / period) + 1
    if n > 0 then return period, n, 0 end
    return period, 0, math.ceil(ahead - (T.rate - 1) * period)
  end

  -- grantroom is spendroom less what the grants not yet claimed will
  -- borrow at their claims (spend_grant each): a grant is made only when
  -- its claim will find room, so a binding window does not grant more
  -- activations than it can lend to, each parked again at its claim.
  local function grantroom(T)
    local room, reset = spendroom(T)
    if room then room = room - math.max(T.admitted - T.running, 0) * T.sgrant end
    return room, reset
  end

  -- ceiling is the ceiling r meets now: its wait reason and when room
  -- will next exist (ms, 0: unknown); nil when it meets none.
  function adm.ceiling(T, r)
    local room, reset = grantroom(T)
    if room and room <= 0 then return 'tenant_budget', reset end
    if not (T.runs or T.rate) or not first(T, r) then return nil end
    if T.runs and redis.call('SCARD', T.K.roots) >= T.runs then return 'tenant_runs', 0 end
    if T.rate then
      local _, n, wait = gcra(T)
      if n == 0 then return 'tenant_rate', T.now + wait end
    end
    return nil
  end

  -- started counts the start of r's root chain when r starts one: it is
  -- in flight from its first grant, and takes a start of the rate.
  local function started(T, r)
    if r.c ~= 1 or redis.call('SADD', T.K.roots, chainof(r)) == 0 or not T.rate then return end
    T.tat = math.max(T.tat, T.now) + 60000 / T.rate
    redis.call('HSET', T.K.state, 'gcra', T.tat)
  end

  local function later(T, at)
    if at and at > 0 and (T.retry == 0 or at < T.retry) then T.retry = at end
  end

  -- toblocked puts a into the ceiling queue for reason why; room will
  -- next exist at (ms, 0: unknown).
  function adm.toblocked(T, a, r, why, at)
    r.st, r.why, r.wk = 'blocked', why, nil
    redis.call('ZADD', T.K.bq, 0, why .. '|' .. hex(score(r)) .. '|' .. a)
    count(T, r, 1)
    save(T, a, r)
    later(T, at)
  end

  -- roomfor is how many waiters of reason why may go back to the ready
  -- queue now (the grant loop checks each again), and when room will
  -- next exist when there is none.
  local function roomfor(T, why)
    if why == 'tenant_budget' then
      local room, reset = grantroom(T)
      if room and room <= 0 then return 0, reset end
    elseif why == 'tenant_runs' and T.runs then
      return math.max(T.runs - redis.call('SCARD', T.K.roots), 0), 0
    elseif why == 'tenant_rate' and T.rate then
      local _, n, wait = gcra(T)
      return n, T.now + wait
    end
    return EXAMINE_MAX, 0
  end

  -- wakeblocked moves to the ready queue, in order, the ceiling waiters
  -- whose ceiling has room now (after an end, a raised ceiling, a new
  -- window, time passing); for a ceiling still without room it notes
  -- when room will exist (T.retry).
  function adm.wakeblocked(T)
    if redis.call('ZCARD', T.K.bq) == 0 then return end
    for _, why in ipairs({'tenant_budget', 'tenant_runs', 'tenant_rate'}) do
      local ms = redis.call('ZRANGEBYLEX', T.K.bq, '[' .. why .. '|', '(' .. why .. '|\255', 'LIMIT', 0, EXAMINE_MAX)
      if #ms > 0 then
        local n, at = roomfor(T, why)
        if n == 0 then later(T, at) end
        for i = 1, math.min(n, #ms) do
          if not readyagain(T, string.sub(ms[i], #why + 19)) then redis.call('ZREM', T.K.bq, ms[i]) end
        end
      end
    end
  end

  -- lend moves an allowance of up to want (nano) from the room of r's
  -- windows (those of now at its claim) into r's allowance (held in each
  -- window). Returns what it lent; 0 when there is no room. Without a
  -- spend limit it lends nothing and r holds no allowance.
  function adm.lend(T, r, want)
    if not T.spending then return 0 end
    if not r.aw then r.aw, r.al = {T.wins[1].name, T.wins[2].name}, 0 end
    local room = spendroom(T, r.aw)
    local n = math.min(want, room or want)
    if n <= 0 then return 0 end
    for _, w in ipairs(r.aw) do redis.call('HINCRBY', T.K.spend, w .. ':held', n) end
    r.al = r.al + n
    return n
  end

  -- settle ends r's allowance, once: used (nano; nil: unknown, the whole
  -- allowance) is spent in its windows, what exceeded the allowance is
  -- their overrun, and the allowance is held no more.
  function adm.settle(T, r, used)
    if not r.aw then
      -- No allowance (no spend limit): what it spent is counted in
      -- today's and this month's windows all the same, for tenant show
      -- and for a limit set later in the window.
      if used and used > 0 then
        for _, w in ipairs(T.wins) do redis.call('HINCRBY', T.K.spend, w.name .. ':spent', used) end
      end
      return
    end
    local u = used or r.al
    for _, w in ipairs(r.aw) do
      redis.call('HINCRBY', T.K.spend, w .. ':held', -r.al)
      redis.call('HINCRBY', T.K.spend, w .. ':spent', math.min(u, r.al))
      if u > r.al then redis.call('HINCRBY', T.K.spend, w .. ':overrun', u - r.al) end
    end
    r.aw, r.al = nil, nil
    T.settled = true
  end

  -- lapse keeps the allowance of running activation a (record r), whose
  -- lease was reaped, in the lapsed hash until what it used is known
  -- (settlelapsed): its windows still hold it. Without an allowance (no
  -- spend limit) it keeps the run and the time, so that what it spent is
  -- counted all the same.
  function adm.lapse(T, a, r)
    -- The same id lapsed before (asynq ran its task again, and that
    -- worker died too): the older lapse moves to <a>#<ms>.
    local old = redis.call('HGET', T.K.lapsed, a)
    if old then redis.call('HSET', T.K.lapsed, a .. '#' .. T.now, old) end
    redis.call('HSET', T.K.lapsed, a, cjson.encode({run = r.run, aw = r.aw, al = r.al, t = T.now}))
  end

  -- settlelapsed settles the allowance lapsed activation a held, once,
  -- with used (nano; nil: unknown, the whole allowance) as a release
  -- would. Returns 1 when a was lapsed.
  function adm.settlelapsed(T, a, used)
    if a == nil or a == '' then return 0 end
    local raw = redis.call('HGET', T.K.lapsed, a)
    if not raw then return 0 end
    local l = cjson.decode(raw)
    if l.aw == cjson.null then l.aw = nil end
    adm.settle(T, {aw = l.aw, al = l.al}, used)
    redis.call('HDEL', T.K.lapsed, a)
    return 1
  end

  -- endchain ends root chain root (its last run finished): it is in
  -- flight no more. Returns 1 when it was.
  function adm.endchain(T, root)
    if root == nil or root == '' then return 0 end
    return redis.call('SREM', T.K.roots, root)
  end

  -- grants is the grant loop: the ready queue's head is granted while the
  -- tenant is under its limit, up to most grants and EXAMINE_MAX entries
  -- looked at; an entry whose key filled since it became ready moves to
  -- that key's queue. Nothing is granted while the tenant is fenced.
  function adm.grants(T, most)
    if T.fence > T.now then return end
    local examined = 0
    while T.admitted < limit(T) and examined < EXAMINE_MAX and T.ngrants < most do
      local head = redis.call('ZRANGE', T.K.ready, 0, 0)
      local a = head[1]
      if not a then return end
      examined = examined + 1
      local raw = redis.call('HGET', T.K.acts, a)
      if not raw then
        redis.call('ZREM', T.K.ready, a)
      else
        local r = cjson.decode(raw)
        local full = adm.fullkey(T, r)
        local why, at
        if not full then why, at = adm.ceiling(T, r) end
        if full then
          unqueue(T, a, r)
          adm.tokey(T, a, r, full)
        elseif why then
          unqueue(T, a, r)
          adm.toblocked(T, a, r, why, at)
        else
          started(T, r)
          adm.grant(T, a, r)
        end
      end
    end
  end

  -- reap ends up to REAP_MAX leases that expired (12.2): a running one is
  -- reaped (its record deleted: its activation's late release finds
  -- nothing), a granted one nobody claimed returns to the head of its
  -- class in the ready queue.
  function adm.reap(T)
    local due = redis.call('ZRANGEBYSCORE', T.K.leases, '-inf', T.now, 'LIMIT', 0, REAP_MAX)
    for _, a in ipairs(due) do
      local raw = redis.call('HGET', T.K.acts, a)
      if not raw then
        redis.call('ZREM', T.K.leases, a)
      else
        local r = cjson.decode(raw)
        redis.call('HINCRBY', T.K.state, 'reaped:' .. r.st, 1)
        adm.unhold(T, a, r)
        if r.st == 'granted' then
          r.g, r.ga, r.w, r.ar = nil, nil, nil, 0
          adm.toready(T, a, r)
        else
          adm.lapse(T, a, r)
          redis.call('HDEL', T.K.acts, a)
        end
      end
    end
  end

  -- new is the record of a new request from its JSON (the caller's
  -- fields), placed: a full key parks it in that key's queue, else it is
  -- ready. ACTIVATED is told by T.activated.
  function adm.new(T, a, req)
    local r = cjson.decode(req)
    r.rq, r.why, r.e = T.now, 'capacity', 0
    r.ar = redis.call('HINCRBY', T.K.state, 'arrival', 1)
    T.activated = redis.call('HSETNX', T.K.state, 'active', T.now) == 1
    local full = adm.fullkey(T, r)
    if full then
      adm.tokey(T, a, r, full)
    else
      adm.toready(T, a, r)
    end
    return r
  end

  -- request is an activation's request (adm_request.lua): once per
  -- activation (a second request reads the first one's record), then the
  -- grant loop. It returns a's record as it stands; or, under
  -- on_exhausted: refuse, nil and the ceiling a root chain's first
  -- activation meets, or a full spend window a child's start meets (no
  -- record is made).
  function adm.request(T, a, req, most)
    local raw = redis.call('HGET', T.K.acts, a)
    if raw then
      adm.grants(T, most)
      raw = redis.call('HGET', T.K.acts, a)
      return cjson.decode(raw)
    end
    if T.refuse then
      local r = cjson.decode(req)
      local why, at
      if first(T, r) then
        why, at = adm.ceiling(T, r)
      elseif r.ch and r.r == 'start' then
        local room, reset = spendroom(T)
        if room and room <= 0 then why, at = 'tenant_budget', reset end
      end
      if why then
        later(T, at)
        return nil, why
      end
    end
    adm.new(T, a, req)
    adm.grants(T, most)
    return cjson.decode(redis.call('HGET', T.K.acts, a))
  end

  -- claim turns a's grant into a running lease of lease ms held by token.
  -- Without a grant it decides as a request: a's record (made from req
  -- when there is none) takes its turn in the grant loop, and runs when
  -- granted; else it stays parked and its next task gets a new id (e).
  -- A running activation holds an allowance of its spend windows while
  -- the tenant has a spend limit (lend); none left parks it
  -- (tenant_budget). Returns 'RUN', 'BUSY' (a live activation holds it)
  -- or 'PARK', and a's record.
  function adm.claim(T, a, req, token, lease, most)
    local raw = redis.call('HGET', T.K.acts, a)
    local r
    if raw then r = cjson.decode(raw) else r = adm.new(T, a, req) end
    if r.st == 'running' then
      if r.w == token then return 'RUN', r end
      return 'BUSY', r
    end
    if r.st ~= 'granted' then
      adm.grants(T, most)
      r = cjson.decode(redis.call('HGET', T.K.acts, a))
    end
    if r.st ~= 'granted' then
      r.e = (r.e or 0) + 1
      save(T, a, r)
      return 'PARK', r
    end
    if T.spending and adm.lend(T, r, T.sgrant) == 0 then
      -- Its windows' room went to others' allowances since its grant.
      adm.unhold(T, a, r)
      redis.call('HINCRBY', T.K.state, 'released', 1)
      local _, reset = spendroom(T)
      r.g, r.ga, r.w, r.aw, r.al = nil, nil, nil, nil, nil
      r.e = (r.e or 0) + 1
      adm.toblocked(T, a, r, 'tenant_budget', reset)
      return 'PARK', r
    end
    count(T, r, -1)
    r.st, r.w = 'running', token
    count(T, r, 1)
    T.running = redis.call('HINCRBY', T.K.state, 'running', 1)
    redis.call('ZADD', T.K.leases, T.now + lease, a)
    save(T, a, r)
    return 'RUN', r
  end

  -- release ends activation a held by token ("" for any holder): its
  -- grant (released, its allowance settled with used, nano; nil:
  -- unknown), or its parked request. Returns 1 when it ended something,
  -- 0 when a had nothing or another token holds it.
  function adm.release(T, a, token, used)
    local raw = redis.call('HGET', T.K.acts, a)
    if not raw then return 0 end
    local r = cjson.decode(raw)
    -- A holder's release names its token: a record it does not hold (one
    -- granted again after its own was reaped, or run by another) is not
    -- its to end.
    if token ~= '' and r.w ~= token then return 0 end
    if r.st == 'granted' or r.st == 'running' then
      adm.settle(T, r, used)
      adm.unhold(T, a, r)
      redis.call('HINCRBY', T.K.state, 'released', 1)
    else
      unqueue(T, a, r)
    end
    redis.call('HDEL', T.K.acts, a)
    return 1
  end

  -- topup lends running activation a (held by token) up to want (nano;
  -- at least spend_grant) more of its windows' room, once per id (9.2 step 3: a retried turn
  -- gets the first outcome). Returns its allowance after it (-1: the
  -- tenant has no spend limit; -2: a is not running under token) and
  -- what this call lent.
  function adm.topup(T, a, token, want, id)
    local raw = redis.call('HGET', T.K.acts, a)
    if not raw then return -2, 0 end
    local r = cjson.decode(raw)
    if r.st ~= 'running' or r.w ~= token then return -2, 0 end
    if not T.spending and not r.aw then return -1, 0 end
    if r.tu == id then return r.al or 0, 0 end
    local n = adm.lend(T, r, math.max(want, T.sgrant))
    r.tu = id
    save(T, a, r)
    return r.al or 0, n
  end

  -- cancel removes a's parked request; a granted or running activation is
  -- left to end as it will. Returns 1 when it removed one.
  function adm.cancel(T, a)
    local raw = redis.call('HGET', T.K.acts, a)
    if not raw then return 0 end
    local r = cjson.decode(raw)
    if r.st == 'granted' or r.st == 'running' then return 0 end
    unqueue(T, a, r)
    redis.call('HDEL', T.K.acts, a)
    return 1
  end

  -- wakeall moves to ready the first waiters of every key with a free
  -- slot (after a raised max, or a pump that is the backstop of a lost
  -- release).
  function adm.wakeall(T)
    local kw = redis.call('HGETALL', T.K.kwait)
    for i = 1, #kw, 2 do
      local k = kw[i]
      local held = num(redis.call('HGET', T.K.kheld, k), 0)
      local ms = redis.call('ZRANGEBYLEX', T.K.kq, '[' .. k .. '|', '(' .. k .. '|\255', 'LIMIT', 0, 1)
      if ms[1] then
        local raw = redis.call('HGET', T.K.acts, string.sub(ms[1], #k + 19))
        if raw then
          local r = cjson.decode(raw)
          local room = -1
          for j, rk in ipairs(r.k or {}) do
            if rk == k then room = max(T, r, j) - held end
          end
          wakekey(T, k, math.min(room, tonumber(kw[i + 1])))
        else
          wakekey(T, k, 1)
        end
      end
    end
  end

  -- renew renews the leases of the activations one worker runs of this
  -- tenant (acts: {activation, token, record JSON} triples) to now +
  -- lease. A lease that is gone is lost (the worker stops that
  -- activation), unless the tenant is fenced: then it is re-asserted,
  -- and one whose key is full hands back. seen is the highest generation
  -- the worker saw: a slot whose generation is below it lost writes, and
  -- is fenced for one lease (12.3). Returns fenced (0/1), the lost and
  -- the handed-back activations.
  function adm.renew(T, seen, lease, acts)
    local fenced = 0
    if seen > T.gen then
      T.fence = T.now + lease
      T.gen = seen + 1
      redis.call('HSET', T.K.state, 'fence_until', T.fence, 'gen', T.gen)
      redis.call('HINCRBY', T.K.state, 'fenced', 1)
      fenced = 1
    end
    local lost, back = {}, {}
    for i = 1, #acts, 3 do
      local a, token = acts[i], acts[i + 1]
      local raw = redis.call('HGET', T.K.acts, a)
      local r = raw and cjson.decode(raw)
      if r and r.st == 'running' and r.w == token then
        redis.call('ZADD', T.K.leases, T.now + lease, a)
      elseif not r and T.fence > T.now and acts[i + 2] ~= '' then
        r = cjson.decode(acts[i + 2])
        if adm.fullkey(T, r) then back[#back + 1] = a end
        r.st, r.w = 'running', token
        hold(T, a, r)
        T.running = redis.call('HINCRBY', T.K.state, 'running', 1)
        count(T, r, 1)
        redis.call('ZADD', T.K.leases, T.now + lease, a)
        save(T, a, r)
      else
        lost[#lost + 1] = a
      end
    end
    if T.fence > T.now then fenced = 1 end
    return fenced, lost, back
  end

  -- drain takes up to n parked or granted activations off the tenant's
  -- queues (admission off): their records are deleted and returned (a,
  -- record pairs) for the caller to enqueue. Running activations stay,
  -- to be reaped when their leases lapse.
  function adm.drain(T, n)
    local out = {}
    local function take(a)
      local raw = redis.call('HGET', T.K.acts, a)
      if not raw then return end
      local r = cjson.decode(raw)
      if r.st == 'granted' then
        adm.unhold(T, a, r)
      else
        unqueue(T, a, r)
      end
      redis.call('HDEL', T.K.acts, a)
      out[#out + 1] = a
      out[#out + 1] = raw
    end
    for _, a in ipairs(redis.call('ZRANGE', T.K.ready, 0, n - 1)) do take(a) end
    for _, m in ipairs(redis.call('ZRANGE', T.K.kq, 0, n - 1)) do
      local a = string.match(m, '|%x+|(.*)$')
      if a then take(a) end
    end
    for _, m in ipairs(redis.call('ZRANGE', T.K.bq, 0, n - 1)) do
      local a = string.match(m, '|%x+|(.*)$')
      if a then take(a) end
    end
    if #out == 0 then
      for _, a in ipairs(redis.call('ZRANGE', T.K.leases, 0, -1)) do
        local raw = redis.call('HGET', T.K.acts, a)
        if raw and cjson.decode(raw).st == 'granted' then take(a) end
      end
    end
    return out
  end

  -- begin is what every tenant script does first, from its ARGV[1..4]
  -- (now in ms, the caller's policy version, its settings of the
  -- tenant as JSON, its provisional share): the settings synced, the
  -- call's context opened, expired leases reaped.
  function adm.begin(KEYS, ARGV)
    local K = adm.keys(KEYS, 1)
    local T = adm.open(K, tonumber(ARGV[1]), ARGV[4], tonumber(ARGV[2]) or 0, ARGV[3])
    adm.reap(T)
    return T
  end

  -- reply is head followed by the generation, when room will next exist
  -- for a ceiling waiter (ms, 0: no such wait; the caller schedules a
  -- pump then) and the grants the call made (activation, record pairs).
  function adm.reply(T, head)
    head[#head + 1] = T.gen
    head[#head + 1] = T.retry
    for _, v in ipairs(T.grants) do head[#head + 1] = v end
    return head
  end

  -- status is the place of a's record r as the caller tells it: the
  -- state, what it waits for and the key it waits on.
  function adm.status(T, r)
    if r.st == 'ready' then
      if T.maxrun and T.admitted >= T.maxrun then return {'PARKED', 'tenant_concurrency', ''} end
      return {'PARKED', 'capacity', ''}
    elseif r.st == 'key' then
      return {'PARKED', 'concurrency', r.wk}
    elseif r.st == 'blocked' then
      return {'PARKED', r.why, ''}
    end
    return {string.upper(r.st), '', ''}
  end
end
