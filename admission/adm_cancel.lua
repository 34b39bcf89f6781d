-- adm_cancel.lua removes a parked request (its run was cancelled while it
-- waited for admission); a granted or running activation ends as it will.
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] activation id, ARGV[6] the
-- most grants to make, ARGV[7] the root chain that ended with it ("":
-- none)
-- Returns {removed (1, or 0: nothing parked), generation, retry at, then
-- activation, record pairs of the grants made}.
local T = adm.begin(KEYS, ARGV)
local n = adm.cancel(T, ARGV[5])
adm.endchain(T, ARGV[7])
adm.wakeblocked(T)
adm.grants(T, tonumber(ARGV[6]))
return adm.reply(T, {n})
