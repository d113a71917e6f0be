-- reserve: KEYS = the ticket's record, then per item: its counter bucket, its counter's
-- holds; ARGV = now, minute, then per item: hold, limit ('' = none), carried.
-- A ticket already settled places nothing (returns -5); one already reserved is not placed
-- twice (returns -1). Else the fence's answer if it refuses (fence.lua: -2, -3, -7, -8, -4). Else
-- checks every item with a limit (counted = used + live holds of the counter + carried; it
-- fits when counted < limit and counted + hold <= limit); only if all fit, adds each hold to
-- r<minute> of its counter's holds and records the ticket as held.
-- Returns -1 when reserved, else the 0-based index of the first item that did not fit.
local now = tonumber(ARGV[1])
local minute = ARGV[2]
local hold_until = tonumber(minute) * 60000
local state = ticket_state(KEYS[1], now)
if state == 'h' then
  return -1
elseif state ~= nil then
  return -5
end
local fenced = fence_check(now)
if fenced then
  return fenced
end
local items = (#KEYS - 1) / 2
-- what the fence lists: each bucket found, each holds key given a hold (KEYS index -> kept
-- until)
local kept = array(#KEYS)
for i = 1, items do
  local base = 2 + (i - 1) * 3
  local limit = ARGV[base + 2]
  if limit ~= '' then
    local used, _, until_ms = load_counter(KEYS[2 * i], now)
    kept[2 * i] = until_ms
    local held = load_holds(KEYS[2 * i + 1], now, '')
    local counted = used + held + tonumber(ARGV[base + 3])
    local cap = tonumber(limit)
    -- hold > cap - counted rather than counted + hold > cap: the difference is exact in
    -- doubles up to 2^53, the sum may round.
    if counted >= cap or tonumber(ARGV[base + 1]) > cap - counted then
      return i - 1
    end
  end
end
for i = 1, items do
  local hold = ARGV[2 + (i - 1) * 3 + 1]
  if hold ~= '0' then
    local key = KEYS[2 * i + 1]
    redis.call('HINCRBY', key, 'r' .. minute, hold)
    live_at_least(key, hold_until, now)
    kept[2 * i + 1] = hold_until
  end
end
set_ticket(KEYS[1], 'h', hold_until, now)
fence_register(kept, now, minute)
return -1
