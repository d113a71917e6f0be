-- unreserve: KEYS = a ticket's record in one slot group, then per item: its counter's holds;
-- ARGV = now, minute, then per item: its hold. With slot groups (groups.rs), the holds a
-- group placed for a ticket that another group refused: given back from r<minute> (never
-- below zero; an expired hold is left) and the record dropped, so the ticket may reserve
-- again. Only while the record says held ('h'): given back already, settled or never
-- placed, it does nothing. Returns 1 if it gave back, else 0.
local now = tonumber(ARGV[1])
if ticket_state(KEYS[1], now) ~= 'h' then
  return 0
end
if tonumber(ARGV[2]) * 60000 > now then
  local field = 'r' .. ARGV[2]
  for i = 2, #KEYS do
    local hold = ARGV[i + 1]
    if hold ~= '0' and redis.call('HINCRBY', KEYS[i], field, '-' .. hold) < 0 then
      redis.call('HDEL', KEYS[i], field)
    end
  end
end
redis.call('DEL', KEYS[1])
return 1
