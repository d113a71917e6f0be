-- reserve_known: a reservation decided from known (possibly cached) counter values, checked
-- here against what the decision rested on, in one step (docs/redis-internals.md, "One
-- round trip to admit"). KEYS = the ticket's record; per counter read: its bucket, its holds; per
-- previous bucket read (sliding windows): the bucket. ARGV = now, minute, counters read (n),
-- previous buckets read (p), then per previous bucket: its counter (1-based); items (m), then per
-- item: its counter, hold, limit ('' = none), carried, its counter's previous bucket (0 = none),
-- the use the decision assumed there; skipped sources (s), then per source: rules (r), then
-- per rule: its counter, amount, carried.
-- Answers {code, used, held (per counter), used (per previous bucket)}: code -1 reserved (the
-- values then include the holds placed), the 0-based index of the first item that does not
-- fit, -6 the decision no longer holds (a skipped source has room now, or a previous bucket
-- the decision counted grew); nothing is placed on any but -1. -5 settled, or the fence's
-- answer (-2, -3, -7, -8, -4): {code} alone. A ticket already reserved answers -1, placing
-- nothing.
local now = tonumber(ARGV[1])
local minute = ARGV[2]
local hold_until = tonumber(minute) * 60000
local state = ticket_state(KEYS[1], now)
if state ~= nil and state ~= 'h' then
  return {-5}
end
if state == nil then
  local fenced = fence_check(now)
  if fenced then
    return {fenced}
  end
end
local n, p = number_of(ARGV[3]), number_of(ARGV[4])
-- The answer, filled in place (arrays sized once): out[2c] used and out[2c + 1] held of
-- counter c, out[1 + 2n + j] previous bucket j; out[1] the code.
local out = array(1 + 2 * n + p)
local until_of, kept_for_minute = array(n), array(n)
local field = 'r' .. minute
local live_field = hold_until > now and field or ''
for c = 1, n do
  local u, _, until_ms = load_counter(KEYS[2 * c], now)
  out[2 * c], until_of[c] = u, until_ms
  out[2 * c + 1], kept_for_minute[c] = load_holds(KEYS[2 * c + 1], now, live_field)
end
local at_prev = 1 + 2 * n
for j = 1, p do
  out[at_prev + j] = load_counter(KEYS[at_prev + j], now)
end
if state == 'h' then
  out[1] = -1
  return out
end
-- counted = used + live holds + carried; it fits when counted < limit and hold <= limit -
-- counted (the difference is exact in doubles up to 2^53, the sum may round).
local a = 5 + p
local m = number_of(ARGV[a])
-- per item fitted: its counter, its hold, its first argument's index
local items = array(3 * m)
for i = 1, m do
  local b = a + (i - 1) * 6
  local c, hold, limit = number_of(ARGV[b + 1]), number_of(ARGV[b + 2]), ARGV[b + 3]
  -- '0': no previous bucket (most rules); compared as text, converting only the others
  if ARGV[b + 5] ~= '0' and out[at_prev + number_of(ARGV[b + 5])] > tonumber(ARGV[b + 6]) then
    out[1] = -6
    return out
  end
  if limit ~= '' then
    local counted = out[2 * c] + out[2 * c + 1] + number_of(ARGV[b + 4])
    local cap = tonumber(limit)
    if counted >= cap or hold > cap - counted then
      out[1] = i - 1
      return out
    end
  end
  items[3 * i - 2], items[3 * i - 1], items[3 * i] = c, hold, b
end
local k = a + m * 6 + 1
for _ = 1, number_of(ARGV[k]) do
  local rules = number_of(ARGV[k + 1])
  local room = true
  for r = 1, rules do
    local b = k + 1 + (r - 1) * 3
    local c = number_of(ARGV[b + 1])
    if out[2 * c] + out[2 * c + 1] + number_of(ARGV[b + 3]) >= tonumber(ARGV[b + 2]) then
      room = false
    end
  end
  if room then
    out[1] = -6
    return out
  end
  k = k + 1 + rules * 3
end
-- what the fence lists: each bucket found, each holds key given a hold (KEYS index -> kept
-- until)
local kept = array(2 * n + 1)
for i = 1, m do
  local c, hold, b = items[3 * i - 2], items[3 * i - 1], items[3 * i]
  if ARGV[b + 3] ~= '' then
    kept[2 * c] = until_of[c]
  end
  if hold > 0 then
    local key = KEYS[2 * c + 1]
    redis.call('HINCRBY', key, field, ARGV[b + 2])
    if not kept_for_minute[c] then
      live_at_least(key, hold_until, now)
    end
    kept[2 * c + 1] = hold_until
    out[2 * c + 1] = out[2 * c + 1] + hold
  end
end
set_ticket(KEYS[1], 'h', hold_until, now)
fence_register(kept, now, minute)
out[1] = -1
return out
