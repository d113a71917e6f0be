-- reserve: KEYS = counters; ARGV = now, minute, then per key: hold, limit ('' = none),
-- carried, retain_until. Checks every item with a limit (counted = used + live holds +
-- carried; it fits when counted < limit and counted + hold <= limit); only if all fit, adds
-- each hold to r<minute>. Returns -1 when reserved, else the 0-based index of the first
-- item that did not fit (nothing placed), or the fence's answer (fence.lua: -2, -3, -4).
local now = tonumber(ARGV[1])
local fenced = fence_check(now)
if fenced then
  return fenced
end
local minute = ARGV[2]
local hold_until = tonumber(minute) * 60000
local kept = {}
for i = 1, #KEYS do
  local base = 2 + (i - 1) * 4
  local limit = ARGV[base + 2]
  local used, held, until_ms = load_counter(KEYS[i], now)
  kept[KEYS[i]] = until_ms
  if limit ~= '' then
    local counted = used + held + tonumber(ARGV[base + 3])
    local cap = tonumber(limit)
    -- hold > cap - counted rather than counted + hold > cap: the difference is exact in
    -- doubles up to 2^53, the sum may round.
    if counted >= cap or tonumber(ARGV[base + 1]) > cap - counted then
      return i - 1
    end
  end
end
for i = 1, #KEYS do
  local base = 2 + (i - 1) * 4
  local hold = ARGV[base + 1]
  if hold ~= '0' then
    redis.call('HINCRBY', KEYS[i], 'r' .. minute, hold)
  end
  local retain = tonumber(ARGV[base + 4])
  if hold_until > retain then
    retain = hold_until
  end
  local key = KEYS[i]
  keep_until(key, retain, kept[key], now)
  if retain > kept[key] then
    kept[key] = retain
  end
end
fence_register(kept, now)
return -1
