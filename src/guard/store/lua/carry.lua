-- carry: queued settles carried by the next reservation, in one step (docs/redis-internals.md,
-- "Settles ride with the next reservation"). Prepended: common.lua, fence.lua, then settle.lua and
-- reserve_known.lua each wrapped as a function of its own KEYS and ARGV (settle_one,
-- reserve_one). KEYS = the reservation's keys, then each settle's. ARGV = the number of
-- settles s, the reservation's key and argument counts, per settle its key and argument
-- counts; then the reservation's arguments, then each settle's. The fence's flags cover the
-- reservation's keys ('0' for the settles' keys): its checks see the reservation alone.
-- The fence is checked first (unless the ticket has a record), then the settles (each as
-- settle.lua: once per id), then the reservation, which so counts them. Answers {one answer per
-- settle (0 settled, 1 already), then reserve_known's answer}.
local s, rk, ra = number_of(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
-- The fence judges the store as the reservation found it, before the settles: a settle
-- adding to a counter lost meanwhile recreates its key, which must not hide the loss.
local fenced = nil
local now = tonumber(ARGV[4 + 2 * s])
if ticket_state(KEYS[1], now) == nil then
  fenced = fence_check(now)
end
local out = array(s)
local key_at, arg_at = rk + 1, 4 + 2 * s + ra
for j = 1, s do
  local k, a = tonumber(ARGV[2 + 2 * j]), tonumber(ARGV[3 + 2 * j])
  -- (copies by one table constructor each, sized once: not grown one by one)
  local keys, args = {unpack(KEYS, key_at, key_at + k - 1)}, {unpack(ARGV, arg_at, arg_at + a - 1)}
  out[j] = settle_one(keys, args)
  key_at, arg_at = key_at + k, arg_at + a
end
local reserved
if fenced then
  reserved = {fenced}
else
  -- its keys come first (and it reads none past them): no copy
  reserved = reserve_one(KEYS, {unpack(ARGV, 4 + 2 * s, 3 + 2 * s + ra)})
end
-- settle answers then reserve_known's, in one table sized once
local answer = array(s + #reserved)
for j = 1, s do
  answer[j] = out[j]
end
for j = 1, #reserved do
  answer[s + j] = reserved[j]
end
return answer
