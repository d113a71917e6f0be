-- The epoch fence (docs/redis.md, "The epoch fence"), prepended to reserve after common.lua.
-- The caller appends the epoch key to KEYS and two arguments to ARGV: the generation the guard
-- trusts ('' for none yet) and one character per counter key ('1' fenced, '0' not). They are
-- taken off here, so the script body sees its own keys and arguments only.
--
-- The epoch is a hash: g generation (unique text), r run_id of the Redis process that wrote
-- it, t guard time it was written, x<bucket> until when the registry of that bucket is kept.
-- A registry `<epoch key>:<g>:<bucket>` lists every fenced counter of the bucket written in
-- generation g, with the time it is kept until: a listed counter that is missing was lost.
local FENCE_EPOCH = table.remove(KEYS)
local FENCE_FLAGS = table.remove(ARGV)
local FENCE_GEN = table.remove(ARGV)
local FENCE_ON = string.find(FENCE_FLAGS, '1', 1, true) ~= nil

local function fence_run_id()
  return string.match(redis.call('INFO', 'server'), 'run_id:(%x+)')
end

local function fence_bucket(key)
  return string.match(key, ':(%-?%d+)$') or '0'
end

-- nil when every fenced counter can be trusted; else the reserve's answer: -2 the epoch is
-- missing or was written by another Redis process, -3 the guard's generation is not the
-- store's (it reads the epoch again), -4 a counter the epoch expects is missing.
local function fence_check(now)
  if not FENCE_ON then
    return nil
  end
  local epoch = redis.call('HMGET', FENCE_EPOCH, 'g', 'r')
  if not epoch[1] or epoch[2] ~= fence_run_id() then
    return -2
  end
  if epoch[1] ~= FENCE_GEN then
    return -3
  end
  for i = 1, #KEYS do
    if string.sub(FENCE_FLAGS, i, i) == '1' and redis.call('EXISTS', KEYS[i]) == 0 then
      local bucket = fence_bucket(KEYS[i])
      local registry = FENCE_EPOCH .. ':' .. FENCE_GEN .. ':' .. bucket
      local listed = redis.call('HGET', registry, KEYS[i])
      if listed and tonumber(listed) > now then
        return -4
      end
      local kept = redis.call('HGET', FENCE_EPOCH, 'x' .. bucket)
      if kept and tonumber(kept) > now and redis.call('EXISTS', registry) == 0 then
        return -4
      end
    end
  end
  return nil
end

-- After a reserve placed its holds: lists each fenced counter in its bucket's registry with
-- `kept[key]` (its retain-until), and keeps the registry (and its entry in the epoch) as long.
local function fence_register(kept, now)
  if not FENCE_ON then
    return
  end
  for i = 1, #KEYS do
    local key = KEYS[i]
    local until_ms = kept[key]
    if string.sub(FENCE_FLAGS, i, i) == '1' and until_ms and until_ms > now then
      local bucket = fence_bucket(key)
      local registry = FENCE_EPOCH .. ':' .. FENCE_GEN .. ':' .. bucket
      local text = string.format('%d', until_ms)
      if redis.call('HGET', registry, key) ~= text then
        redis.call('HSET', registry, key, text)
        local field = 'x' .. bucket
        local listed = tonumber(redis.call('HGET', FENCE_EPOCH, field) or '0')
        if until_ms > listed then
          if listed == 0 then
            -- a new bucket: forget the registries whose time is over
            local flat = redis.call('HGETALL', FENCE_EPOCH)
            for j = 1, #flat, 2 do
              if string.sub(flat[j], 1, 1) == 'x' and tonumber(flat[j + 1]) <= now then
                redis.call('HDEL', FENCE_EPOCH, flat[j])
              end
            end
          end
          redis.call('HSET', FENCE_EPOCH, field, text)
          local ttl = math.max(until_ms - now, 1000)
          if redis.call('PTTL', registry) < ttl then
            redis.call('PEXPIRE', registry, string.format('%d', ttl))
          end
        end
      end
    end
  end
end
