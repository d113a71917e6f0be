-- migrate_write: writes keys read from a shared-layout store into their slot group
-- (migrate.rs). KEYS = the keys (one group's), then the group's record of what was copied (a
-- hash: '<key> <field>' -> the amount copied); ARGV = per key: time to live (ms, -1 none),
-- field count, then field, value, ... Use (`u`) and holds (`r<minute>`) read from the shared
-- layout are use and holds of other calls than those the new layout counted, so what was
-- read beyond what an earlier run copied is added (copying twice never counts a copy twice,
-- and use the new layout counted first is kept); a bucket filled from the ledger (`s`), whose
-- sum counts the shared layout's use already, takes the larger instead. Retain-until (`e`)
-- becomes the larger; other fields (fill marks, fence marks) are left behind. No time to
-- live is ever shortened. Returns {keys changed (something added or raised), buckets found
-- filled from the ledger (their use kept as the larger, not added)}.
local copied = table.remove(KEYS)
local at, longest, changed, filled_seen = 1, 0, 0, 0
for _, key in ipairs(KEYS) do
  local ttl, count = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  at = at + 2
  local filled = redis.call('HEXISTS', key, 's') == 1
  local touched, saw_use = false, false
  for _ = 1, count do
    local field, value = ARGV[at], ARGV[at + 1]
    at = at + 2
    local hold = string.sub(field, 1, 1) == 'r' and tonumber(string.sub(field, 2)) ~= nil
    saw_use = saw_use or field == 'u'
    if field == 'e' or (field == 'u' and filled) then
      local there = tonumber(redis.call('HGET', key, field) or '0')
      if tonumber(value) > there then
        redis.call('HSET', key, field, value)
        touched = touched or field == 'u'
      end
    elseif field == 'u' or hold then
      local name = key .. ' ' .. field
      local before = tonumber(redis.call('HGET', copied, name) or '0')
      if tonumber(value) > before then
        redis.call('HINCRBY', key, field, tonumber(value) - before)
        redis.call('HSET', copied, name, value)
        touched = true
      end
    end
  end
  if touched then
    changed = changed + 1
  end
  if filled and saw_use then
    filled_seen = filled_seen + 1
  end
  if ttl > 0 and redis.call('EXISTS', key) == 1 and redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
  if ttl > longest then
    longest = ttl
  end
end
if longest > 0 and redis.call('PTTL', copied) < longest then
  redis.call('PEXPIRE', copied, longest)
end
return {changed, filled_seen}
