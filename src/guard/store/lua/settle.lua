-- settle: KEYS = the record of the id settled, the record of the ticket holding, then per
-- hold: its counter's holds; then per add: its counter bucket. ARGV = now, minute, number of
-- holds, settled_until, then per hold: minus its amount; then per add: amount, retain_until.
-- Unless the id already settled (returns 1, nothing done): gives back each hold from
-- r<minute> (never below zero; a hold already expired is left) when the ticket's reservation
-- landed (a whole ticket: it is held; a batch part: its batch landed), adds use to u, and
-- marks the id settled until settled_until, and lists the buckets added to in the epoch
-- fence's registry (fence.lua; a bucket's `l` field says it is listed already); a bucket it
-- recreates after it was lost is marked so (fence_lost). Returns 0. All in one step.
local now = tonumber(ARGV[1])
local field = 'r' .. ARGV[2]
local live = tonumber(ARGV[2]) * 60000 > now
local holds = number_of(ARGV[3])
local whole = KEYS[1] == KEYS[2]
local mark = ticket_state(KEYS[1], now)
if mark ~= nil and not (whole and mark == 'h') then
  return 1
end
local landed
if whole then
  landed = mark == 'h'
else
  local holder = ticket_state(KEYS[2], now)
  landed = holder == 'h' or holder == 's'
end
if landed then
  for i = 1, holds do
    -- Never there (HINCRBY made it negative) goes; zero stays for the next hold of the
    -- minute (load_holds deletes it when the reservation reading it holds in another).
    local key = KEYS[2 + i]
    if not live or redis.call('HINCRBY', key, field, ARGV[4 + i]) < 0 then
      redis.call('HDEL', key, field)
    end
  end
end
fence_add_use(KEYS, 3 + holds, ARGV, 5 + holds, #KEYS - 2 - holds, now)
local until_ms = tonumber(ARGV[4])
if until_ms <= now then
  until_ms = now + 1
end
-- A ticket whose reservation never landed: a late one must find the mark while its holds
-- could still count.
if whole and not landed and tonumber(ARGV[2]) * 60000 > until_ms then
  until_ms = tonumber(ARGV[2]) * 60000
end
set_ticket(KEYS[1], landed and 's' or 'n', until_ms, now)
return 0
