-- fill: KEYS[1] = a counter; ARGV = now, ledger_used, retain_until. Unless the counter is
-- already marked filled (`s`), sets u = max(u, ledger_used), marks it and keeps it until at
-- least retain_until, in one step. Returns 1 if this call filled it, else 0.
local now = tonumber(ARGV[1])
local key = KEYS[1]
local used, _, current = load_counter(key, now)
if redis.call('HEXISTS', key, 's') == 1 then
  return 0
end
redis.call('HSET', key, 's', '1')
if tonumber(ARGV[2]) > used then
  redis.call('HSET', key, 'u', ARGV[2])
end
keep_until(key, tonumber(ARGV[3]), current, now)
return 1
