-- Shared by every usage_guard script (prepended to each). A counter is a hash:
--   u         used (integer)
--   s         filled mark (reserved for filling from the logs)
--   e         retain-until, ms on the guard's clock (the counter is gone after it)
--   r<minute> holds that expire at the start of <minute> (minutes since the epoch)
-- Times come from the caller's clock, never the server's, so a manual clock drives these
-- scripts exactly like the memory store. Amounts stay below 2^53, so Lua numbers are exact.

-- Loads a counter at `now`: deletes holds that have expired (and the whole counter when it
-- is past its retention with no live hold). Returns used, live held, retain-until (0 if none).
local function load_counter(key, now)
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then
    return 0, 0, 0
  end
  local used, held, until_ms = 0, 0, nil
  local dead = {}
  for i = 1, #flat, 2 do
    local field, value = flat[i], flat[i + 1]
    if field == 'u' then
      used = tonumber(value)
    elseif field == 'e' then
      until_ms = tonumber(value)
    elseif string.sub(field, 1, 1) == 'r' then
      local minute = tonumber(string.sub(field, 2))
      local amount = tonumber(value)
      if minute == nil or minute * 60000 <= now or amount <= 0 then
        dead[#dead + 1] = field
      else
        held = held + amount
      end
    end
  end
  if held == 0 and until_ms ~= nil and until_ms <= now then
    redis.call('DEL', key)
    return 0, 0, 0
  end
  if #dead > 0 then
    redis.call('HDEL', key, unpack(dead))
  end
  return used, held, until_ms or 0
end

-- Keeps a counter until at least `until_ms` (guard clock), given its current retain-until
-- `current` (from load_counter): when that moves later, records it in `e` and sets the key's
-- time to live from the caller's `now`. Neither is ever shortened.
local function keep_until(key, until_ms, current, now)
  if until_ms <= current then
    return
  end
  redis.call('HSET', key, 'e', string.format('%d', until_ms))
  local ttl = until_ms - now
  if ttl < 1000 then
    ttl = 1000
  end
  if redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, string.format('%d', ttl))
  end
end
