-- adm_renew.lua renews the leases of one worker's running activations of
-- one tenant, and re-asserts them after a failover lost them (12.3).
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] the highest generation the
-- worker saw of the tenant, ARGV[6] lease (ms), ARGV[7] the most grants
-- to make, ARGV[8..] activation, token, record (JSON) triples
-- Returns {fenced (0/1), n, n lost activations, m, m activations to hand
-- back, generation, retry at, then activation, record pairs of the
-- grants made}.
local T = adm.begin(KEYS, ARGV)
local acts = {}
for i = 8, #ARGV do acts[#acts + 1] = ARGV[i] end
local fenced, lost, back = adm.renew(T, tonumber(ARGV[5]), tonumber(ARGV[6]), acts)
adm.grants(T, tonumber(ARGV[7]))
local head = {fenced, #lost}
for _, a in ipairs(lost) do head[#head + 1] = a end
head[#head + 1] = #back
for _, a in ipairs(back) do head[#head + 1] = a end
return adm.reply(T, head)
