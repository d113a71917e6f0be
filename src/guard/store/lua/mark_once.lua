-- mark_once: KEYS[1] = a mark; ARGV = now, keep_until. Sets the mark unless it is set and
-- still kept at `now` (guard clock); it lives until keep_until. Returns 1 for the call that
-- set it, else 0.
local now = tonumber(ARGV[1])
local until_ms = tonumber(ARGV[2])
local kept = redis.call('GET', KEYS[1])
if kept and tonumber(kept) > now then
  return 0
end
local ttl = until_ms - now
if ttl < 1000 then
  ttl = 1000
end
redis.call('SET', KEYS[1], ARGV[2], 'PX', string.format('%d', ttl))
return 1
