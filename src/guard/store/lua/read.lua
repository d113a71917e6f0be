-- read: KEYS = counters; ARGV[1] = now (ms). Returns {used, held, used, held, ...}.
local now = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  local used, held = load_counter(KEYS[i], now)
  out[#out + 1] = used
  out[#out + 1] = held
end
return out
