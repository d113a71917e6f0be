-- read: KEYS = per counter: its bucket, its holds; ARGV[1] = now (ms).
-- Returns {used, held, used, held, ...}: the bucket's use and every live hold of the counter.
local now = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS, 2 do
  local used = load_counter(KEYS[i], now)
  out[#out + 1] = used
  out[#out + 1] = (load_holds(KEYS[i + 1], now, ''))
end
return out
