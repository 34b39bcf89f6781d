-- adm_release.lua ends an activation, once: its key slots free (each
-- freed key's first waiter to the ready queue), its counts down, then the
-- grant loop. Its allowance is settled with what it used; a root
-- chain that ended leaves the chains in flight; the ceiling waiters that
-- now have room return to the ready queue. A release of a grant that was
-- reaped finds no record and changes nothing (I3).
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] activation id, ARGV[6] the
-- token of the activation that holds it ("": whoever does), ARGV[7] the
-- most grants to make, ARGV[8] what it spent (nano; "": unknown),
-- ARGV[9] the root chain that ended with it ("": none), ARGV[10] the
-- activation of the same run before it ("": none) and ARGV[11] what that
-- one used (nano; "": unknown): when its lease was reaped, its lapsed
-- allowance is settled now, once
-- Returns {released (1, or 0: nothing to release), generation, retry at,
-- then activation, record pairs of the grants made}.
local T = adm.begin(KEYS, ARGV)
local n = adm.release(T, ARGV[5], ARGV[6], tonumber(ARGV[8]))
adm.settlelapsed(T, ARGV[10], tonumber(ARGV[11]))
adm.endchain(T, ARGV[9])
adm.wakeblocked(T)
adm.grants(T, tonumber(ARGV[7]))
return adm.reply(T, {n})
