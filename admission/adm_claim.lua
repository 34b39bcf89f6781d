-- adm_claim.lua turns an activation's grant into a running lease, before
-- the registry's claim: without a grant (a delayed task, a redelivery, a
-- grant that expired) it decides as a request does, and the activation
-- runs when the grant loop grants it, else stays parked.
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1..4] as adm_request.lua's, ARGV[5] activation id, ARGV[6] its
-- request (JSON, for an activation without a record), ARGV[7] the
-- claiming activation's token, ARGV[8] lease (ms), ARGV[9] the most
-- grants to make
-- Returns {RUN | BUSY | PARK, what it waits for, the key it waits on,
-- its record (JSON, with its allowance), generation, retry at, then
-- activation, record pairs of every other grant made}.
local T = adm.begin(KEYS, ARGV)
local verdict, r = adm.claim(T, ARGV[5], ARGV[6], ARGV[7], tonumber(ARGV[8]), tonumber(ARGV[9]))
local head = {verdict, '', '', cjson.encode(r)}
if verdict == 'PARK' then
  local st = adm.status(T, r)
  head[2], head[3] = st[2], st[3]
end
return adm.reply(T, head)
