-- filled: KEYS = counters, then the epoch; ARGV[1] = now, ARGV[2] = '1' when the epoch is a
-- slot group's copy (then the marks follow fill_generation). Returns 1 per counter marked
-- filled from the ledger in the epoch's generation (`s` = the epoch's `g`, '0' without an
-- epoch), 0 otherwise (a counter past its retention, never written, or filled before a
-- recovery).
local now = tonumber(ARGV[1])
local generation, also = fill_generation(table.remove(KEYS), ARGV[2] == '1')
local out = {}
for i = 1, #KEYS do
  load_counter(KEYS[i], now)
  out[i] = marked_filled(KEYS[i], generation, also) and 1 or 0
end
return out
