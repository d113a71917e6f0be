-- groups: the store's list of slot groups (groups.rs). KEYS[1] = the store's epoch, KEYS[2]
-- = the list (a hash: group tag -> `<generation>@<until>`: the generation it was listed
-- under, and until when the entry lasts, guard time). A group is listed only after its copy
-- of the epoch was written (join_group), so a group listed under a generation had its copy
-- then; the copy is kept at least as long as its entry (its `h`, epoch.lua `horizon`). An
-- entry whose time is over counts as absent (its group's copy may have expired with it);
-- one without `@` (written before entries lapsed) lasts.
--   check tag generation code now
--                             -> {'stale'} when the store's epoch is not of `generation`;
--                                {'lost'} when `code` is -2 (the group's copy of the epoch
--                                was missing or of another process when the reserve looked)
--                                and the group is listed under `generation`, or marked held
--                                by a recovery that wrote it or came after it (`held`): its
--                                master lost it, unless another guard joined it since that
--                                look (the caller reads the copy again); else {'join', the
--                                epoch's w or '0'} (the caller then writes the group's copy,
--                                then lists it).
--   list tag generation now until mode
--                             -> lists the group under `generation` until `until` (or the
--                                later time its entry had) if the store's epoch is still of
--                                it, and answers that time (the caller keeps the copy at
--                                least as long: epoch.lua `horizon`); else nothing (0). An
--                                entry marked held by a recovery that names `generation`
--                                keeps its mark (a listing must not lift it). Mode 'renew'
--                                writes nothing (-1) where the entry is gone or its time is
--                                over: its copy may be gone with it, and the group joins
--                                again (copy first); mode 'join' lists it whatever was there.
--                                KEYS[3] = where pruning left off: each listing also drops
--                                the entries whose time is over among the next few of the
--                                list, so a churning user base does not grow it for ever.
--   held generation token tag... -> a recovery about to write `generation` (holding the
--                                recovery lock KEYS[3] by `token`; '' when written without
--                                the lock) found these groups' copies there and of their
--                                masters' processes (group_sweep.rs): each is listed as
--                                `~<generation>|<the store's generation now>` (keeping its
--                                entry's time; an entry dropped since the look is not written
--                                back), so a copy missing from now on is a loss under either;
--                                nothing when the lock is not the token's. Answers how many
--                                it marked.
local op = ARGV[1]
local epoch = redis.call('HMGET', KEYS[1], 'g', 'w')

-- Entry `v` split into its body and its time (nil: it lasts).
local function split(v)
  local at = string.find(v, '@', 1, true)
  if not at then
    return v, nil
  end
  return string.sub(v, 1, at - 1), tonumber(string.sub(v, at + 1))
end

-- Drops the entries whose time is over among the next 16 fields of the list.
local function prune(now)
  local cursor = redis.call('GET', KEYS[3]) or '0'
  local page = redis.call('HSCAN', KEYS[2], cursor, 'COUNT', 16)
  local flat = page[2]
  for j = 1, #flat, 2 do
    local _, until_ms = split(flat[j + 1])
    if until_ms and until_ms <= now then
      redis.call('HDEL', KEYS[2], flat[j])
    end
  end
  redis.call('SET', KEYS[3], page[1])
end

if op == 'list' then
  if epoch[1] ~= ARGV[3] then
    return 0
  end
  local now, until_ms = tonumber(ARGV[4]), tonumber(ARGV[5])
  local old = redis.call('HGET', KEYS[2], ARGV[2])
  local body, was = ARGV[3], nil
  if old then
    local old_body
    old_body, was = split(old)
    if was and was <= now then
      old = nil
    elseif string.sub(old_body, 1, 1) == '~' then
      local bar = string.find(old_body, '|', 2, true)
      if bar and (string.sub(old_body, 2, bar - 1) == ARGV[3] or string.sub(old_body, bar + 1) == ARGV[3]) then
        body = old_body
      end
    end
  end
  if not old and ARGV[6] == 'renew' then
    return -1
  end
  if old and was and was > until_ms then
    until_ms = was
  end
  redis.call('HSET', KEYS[2], ARGV[2], body .. '@' .. string.format('%d', until_ms))
  prune(now)
  return until_ms
end
if op == 'held' then
  if ARGV[3] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[3] then
    return 0
  end
  local mark = '~' .. ARGV[2] .. '|' .. (epoch[1] or '')
  local marked = 0
  for i = 4, #ARGV do
    -- (an entry dropped since the look is not written back: its time was over)
    local old = redis.call('HGET', KEYS[2], ARGV[i])
    if old then
      local _, until_ms = split(old)
      if until_ms then
        redis.call('HSET', KEYS[2], ARGV[i], mark .. '@' .. string.format('%d', until_ms))
      else
        redis.call('HSET', KEYS[2], ARGV[i], mark)
      end
      marked = marked + 1
    end
  end
  return marked
end
if op ~= 'check' then
  return redis.error_reply('groups: unknown operation ' .. tostring(op))
end
if epoch[1] ~= ARGV[3] then
  return {'stale'}
end
if ARGV[4] == '-2' then
  local listed, until_ms = split(redis.call('HGET', KEYS[2], ARGV[2]) or '')
  if until_ms and until_ms <= tonumber(ARGV[5]) then
    listed = ''
  end
  if listed == ARGV[3] then
    return {'lost'}
  end
  -- marked held by a recovery: lost under the generation it wrote and the one before it
  local bar = string.sub(listed, 1, 1) == '~' and string.find(listed, '|', 2, true)
  if bar and (string.sub(listed, 2, bar - 1) == ARGV[3] or string.sub(listed, bar + 1) == ARGV[3]) then
    return {'lost'}
  end
end
return {'join', epoch[2] or '0'}
