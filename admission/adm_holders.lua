-- adm_holders.lua counts who holds a key: every granted or running
-- activation's record is read (they are the tenant's admitted ones, as
-- many as its share), nothing is written.
--
-- KEYS[1..13] the tenant's keys (admission.lua)
-- ARGV[1] the key (RULE=VALUE), ARGV[2..] run ids (a run's ancestors)
-- Returns {slots of the key held, of them held by activations of the runs
-- named}.
local K = adm.keys(KEYS, 1)
local runs = {}
for i = 2, #ARGV do runs[ARGV[i]] = true end
local held, ours = 0, 0
for _, a in ipairs(redis.call('ZRANGE', K.leases, 0, -1)) do
  local raw = redis.call('HGET', K.acts, a)
  if raw then
    local r = adm.decode(raw)
    for _, k in ipairs(r.k or {}) do
      if k == ARGV[1] then
        held = held + 1
        if runs[r.run] then ours = ours + 1 end
      end
    end
  end
end
return {held, ours}
