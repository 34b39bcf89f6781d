-- adm_settle.lua settles the allowance of an activation whose lease was
-- reaped (adm.lapse), once: housekeeping's backstop for a run whose next
-- activation's release did not settle it (9.2 step 4).
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] the lapsed activation, ARGV[6]
-- what it used (nano; "": unknown, its whole allowance), ARGV[7] the most
-- grants to make
-- Returns {settled (1, or 0: it was not lapsed), generation, retry at,
-- then activation, record pairs of the grants made}.
local T = adm.begin(KEYS, ARGV)
local n = adm.settlelapsed(T, ARGV[5], tonumber(ARGV[6]))
adm.wakeblocked(T)
adm.grants(T, tonumber(ARGV[7]))
return adm.reply(T, {n})
