-- raise_until: KEYS[1] = a note; ARGV = now, until, note. Sets the note to "<until>|<note>"
-- unless it holds a later until still ahead of `now` (guard clock); it lives until `until`
-- (at least a second). Returns 1 if it was set, else 0.
local now = tonumber(ARGV[1])
local until_ms = tonumber(ARGV[2])
local kept = redis.call('GET', KEYS[1])
if kept then
  local kept_until = tonumber(string.match(kept, '^(%-?%d+)|'))
  if kept_until and kept_until > now and kept_until > until_ms then
    return 0
  end
end
local ttl = until_ms - now
if ttl < 1000 then
  ttl = 1000
end
redis.call('SET', KEYS[1], ARGV[2] .. '|' .. ARGV[3], 'PX', string.format('%d', ttl))
return 1
