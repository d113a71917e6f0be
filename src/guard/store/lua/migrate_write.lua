-- migrate_write: writes keys read from a shared-layout store into their slot group
-- (migrate.rs). KEYS = the keys (one group's); ARGV = per key: time to live (ms, -1 none),
-- field count, then field, value, ... Each use (`u`), retain-until (`e`) and hold (`r<minute>`)
-- becomes the larger of what is there and what was read, so copying twice, or over use the
-- new layout already counted, never counts low and never counts a copy twice; other fields
-- (fill marks, fence marks) are left behind. The time to live is never shortened.
local at = 1
for _, key in ipairs(KEYS) do
  local ttl, count = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
  at = at + 2
  for _ = 1, count do
    local field, value = ARGV[at], ARGV[at + 1]
    at = at + 2
    local kind = string.sub(field, 1, 1)
    if field == 'u' or field == 'e' or (kind == 'r' and tonumber(string.sub(field, 2))) then
      local there = tonumber(redis.call('HGET', key, field) or '0')
      if tonumber(value) > there then
        redis.call('HSET', key, field, value)
      end
    end
  end
  if ttl > 0 and redis.call('EXISTS', key) == 1 and redis.call('PTTL', key) < ttl then
    redis.call('PEXPIRE', key, ttl)
  end
end
return #KEYS
