-- filled: KEYS = counters; ARGV[1] = now. Returns 1 per counter marked filled from the ledger
-- (`s`), 0 otherwise (a counter past its retention, or never written, is not).
local now = tonumber(ARGV[1])
local out = {}
for i = 1, #KEYS do
  load_counter(KEYS[i], now)
  out[i] = redis.call('HEXISTS', KEYS[i], 's')
end
return out
