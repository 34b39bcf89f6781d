-- adm_topup.lua lends a running activation more of its spend windows'
-- room before a model call its allowance may not cover (9.2 step 3),
-- once per id: a turn run again gets the first outcome.
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] activation id, ARGV[6] the
-- token of the activation that holds it, ARGV[7] how much more it asks
-- for (nano), ARGV[8] the top-up's id (<activation>:<turn>)
-- Returns {its allowance after it (nano; -1: the tenant has no spend
-- limit, -2: the activation is not running under the token), what this
-- call lent}.
local T = adm.begin(KEYS, ARGV)
local al, n = adm.topup(T, ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8])
return {al, n}
