-- settle: KEYS = holds' counters, then adds' counters; ARGV = now, minute, number of holds,
-- then per hold: amount; then per add: amount, retain_until. Takes each hold back from
-- r<minute> (never below zero; a hold already gone or expired is left alone), then adds use
-- to u. All in one step.
local now = tonumber(ARGV[1])
local field = 'r' .. ARGV[2]
local live = tonumber(ARGV[2]) * 60000 > now
local holds = tonumber(ARGV[3])
for i = 1, holds do
  local key = KEYS[i]
  local current = tonumber(redis.call('HGET', key, field) or '0')
  if current > 0 then
    local amount = tonumber(ARGV[3 + i])
    if not live or current <= amount then
      redis.call('HDEL', key, field)
    else
      redis.call('HINCRBY', key, field, '-' .. ARGV[3 + i])
    end
  end
end
local base = 3 + holds
for i = holds + 1, #KEYS do
  local j = base + (i - holds - 1) * 2
  local key = KEYS[i]
  local _, _, current = load_counter(key, now)
  redis.call('HINCRBY', key, 'u', ARGV[j + 1])
  keep_until(key, tonumber(ARGV[j + 2]), current, now)
end
return 0
