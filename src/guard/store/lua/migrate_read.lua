-- migrate_read: one page of a shared-layout store's keys, for `migrate_from_shared`
-- (migrate.rs). KEYS[1] = any key of the store's slot (it routes the script there: every key
-- of a shared-layout store lives in that one slot, so on that node); ARGV = cursor, pattern.
-- Returns {next cursor, keys skipped (not hashes), then per key found: key, time to live
-- (ms, -1 none), field count, then field, value, ...}.
-- SCAN walks the node's whole keyspace, the store's or not: large pages, fewer round trips.
local page = redis.call('SCAN', ARGV[1], 'MATCH', ARGV[2], 'COUNT', 2000)
local out = {page[1], 0}
for _, key in ipairs(page[2]) do
  -- A key of another type under the store's names is none of the store's: skipped.
  local flat = redis.pcall('HGETALL', key)
  if type(flat) == 'table' and flat.err ~= nil then
    out[2] = out[2] + 1
  elseif #flat > 0 then
    out[#out + 1] = key
    out[#out + 1] = redis.call('PTTL', key)
    out[#out + 1] = #flat / 2
    for i = 1, #flat do
      out[#out + 1] = flat[i]
    end
  end
end
return out
