-- adm_drain.lua takes up to n parked or granted activations off the
-- tenant's queues when admission is turned off, for the caller to
-- enqueue; running ones are reaped as their leases lapse.
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] n
-- Returns activation, record pairs (none: the queues are empty).
local T = adm.begin(KEYS, ARGV)
return adm.drain(T, tonumber(ARGV[5]))
