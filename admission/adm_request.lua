-- adm_request.lua requests admission for one activation before it is
-- enqueued: once per activation (a repeated request reads the first one's
-- place), a full key parks it in that key's queue, else it is ready; then
-- the grant loop. Under on_exhausted: refuse, a root chain's first
-- activation that meets a tenant ceiling is refused (no record).
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1] now (ms), ARGV[2] the caller's policy version, ARGV[3] its
-- settings of the tenant (JSON), ARGV[4] its provisional share,
-- ARGV[5] activation id, ARGV[6] the request (JSON: run, root, q, p, c,
-- k, m, r, s), ARGV[7] the most grants to make
-- Returns {GRANTED | RUNNING | PARKED | REFUSED, what it waits for (for
-- REFUSED the ceiling), the key it waits on, activated (1: the tenant had
-- no demand before), generation, retry at (ms: when room next exists for
-- a ceiling, 0: unknown), then activation, record pairs of every grant
-- made}.
local T = adm.begin(KEYS, ARGV)
local r, refused = adm.request(T, ARGV[5], ARGV[6], tonumber(ARGV[7]))
local head = {'REFUSED', refused, ''}
if r then head = adm.status(T, r) end
head[4] = T.activated and 1 or 0
return adm.reply(T, head)
