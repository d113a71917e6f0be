-- settle_parts: the parts of one batch, in one step. KEYS = the batch's ticket record, then
-- per part: its record, its share's holds keys, its adds' counter keys. ARGV = now, minute,
-- settled_until, number of parts, then per part: bill (1/0), number of holds, number of adds,
-- the hold amounts, then per add: amount, retain_until.
-- A part's record: g<until> its share was given back (finish), b<until> it was billed (its
-- share given back too). A part without a record gives its share back from r<minute> (if the
-- batch's reservation landed; never below zero; an expired hold is left); a bill of a part
-- not billed adds its use to u as a bill does (fence_add_use: a bucket lost and recreated is
-- marked, each is listed in the fence's registry). Returns, per part, 0 if this call did
-- something, else 1. Prepended: common.lua, fence.lua (its epoch key and two empty arguments
-- at the end, as settle.lua's).
local now = tonumber(ARGV[1])
local field = 'r' .. ARGV[2]
local live = tonumber(ARGV[2]) * 60000 > now
local until_ms = tonumber(ARGV[3])
if until_ms <= now then
  until_ms = now + 1
end
local holder = ticket_state(KEYS[1], now)
local landed = holder == 'h' or holder == 's'
local k, a = 2, 5
local out = {}
for p = 1, tonumber(ARGV[4]) do
  local bill = ARGV[a] == '1'
  local holds, adds = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
  a = a + 3
  local part = KEYS[k]
  k = k + 1
  local state = ticket_state(part, now)
  local give = state == nil
  local add = bill and (state == nil or state == 'g')
  if give and landed then
    for i = 0, holds - 1 do
      local key = KEYS[k + i]
      local current = tonumber(redis.call('HGET', key, field) or '0')
      if current > 0 then
        if not live or current <= tonumber(ARGV[a + i]) then
          redis.call('HDEL', key, field)
        else
          redis.call('HINCRBY', key, field, '-' .. ARGV[a + i])
        end
      end
    end
  end
  k = k + holds
  a = a + holds
  if add then
    fence_add_use(KEYS, k, ARGV, a, adds, now)
  end
  k = k + adds
  a = a + 2 * adds
  if give or add then
    set_ticket(part, add and 'b' or 'g', until_ms, now)
    out[p] = 0
  else
    out[p] = 1
  end
end
return out
