-- adm_publish.lua publishes the fleet's admission policy, or withdraws it
-- (admission off). The version grows by one with every change, never
-- goes back (withdrawing keeps it), so the tenants' settings can follow
-- the newest policy a process read.
--
-- KEYS[1] the policy string
-- ARGV[1] the policy's digest ("": withdraw), ARGV[2] its JSON,
-- ARGV[3] now (RFC 3339), ARGV[4] the file it was read from
-- Returns {changed (1/0), what is published now (JSON)}.
local old = redis.call('GET', KEYS[1])
local version, digest, on = 0, '', false
if old then
  local o = cjson.decode(old)
  version, digest, on = tonumber(o.version) or 0, o.digest or '', o.policy ~= nil
end
if ARGV[1] == '' then
  if not on and old then return {0, old} end
elseif on and digest == ARGV[1] then
  return {0, old}
end
version = version + 1
local out = '{"version":' .. string.format('%d', version) .. ',"published_at":' .. cjson.encode(ARGV[3])
if ARGV[1] ~= '' then
  out = out .. ',"digest":' .. cjson.encode(ARGV[1]) .. ',"source":' .. cjson.encode(ARGV[4]) .. ',"policy":' .. ARGV[2]
end
out = out .. '}'
redis.call('SET', KEYS[1], out)
return {1, out}
