-- fill: KEYS[1] = a counter, KEYS[2] = the epoch; ARGV = now, ledger_used, retain_until, '1'
-- when the epoch is a slot group's copy (as in filled.lua).
-- Unless the counter is already marked filled in the epoch's generation (`s` = the epoch's
-- `g`, '0' without an epoch), sets u = max(u, ledger_used), marks it and keeps it until at
-- least retain_until, in one step. Returns 1 if this call filled it, else 0. A new epoch
-- (a recovery) thus has every counter filled again.
local now = tonumber(ARGV[1])
local key = KEYS[1]
local generation, also = fill_generation(KEYS[2], ARGV[4] == '1')
local used, _, current = load_counter(key, now)
if marked_filled(key, generation, also) then
  return 0
end
redis.call('HSET', key, 's', generation)
if tonumber(ARGV[2]) > used then
  redis.call('HSET', key, 'u', ARGV[2])
  BUCKETS[key] = nil
end
keep_until(key, tonumber(ARGV[3]), current, now)
return 1
