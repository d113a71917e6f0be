-- groups: the store's list of slot groups (groups.rs). KEYS[1] = the store's epoch, KEYS[2]
-- = the list (a hash: group tag -> the generation it was listed under). A group is listed
-- only after its copy of the epoch was written (join_group), so a group listed under a
-- generation had its copy then.
--   check tag generation code -> {'stale'} when the store's epoch is not of `generation`;
--                                {'lost'} when `code` is -2 (the group's copy of the epoch
--                                was missing or of another process when the reserve looked)
--                                and the group is listed under `generation`, or marked held
--                                by a recovery that wrote it or came after it (`held`): its
--                                master lost it, unless another guard joined it since that
--                                look (the caller reads the copy again); else {'join', the
--                                epoch's w or '0'} (the caller then writes the group's copy,
--                                then lists it).
--   list tag generation       -> lists the group under `generation` if the store's epoch is
--                                still of it (1), else nothing (0).
--   held generation token tag... -> a recovery about to write `generation` (holding the
--                                recovery lock KEYS[3] by `token`; '' when written without
--                                the lock) found these groups' copies there and of their
--                                masters' processes (group_sweep.rs): each is listed as
--                                `~<generation>|<the store's generation now>`, so a copy
--                                missing from now on is a loss under either; nothing when
--                                the lock is not the token's. Answers how many it marked.
local op = ARGV[1]
local epoch = redis.call('HMGET', KEYS[1], 'g', 'w')
if op == 'list' then
  if epoch[1] ~= ARGV[3] then
    return 0
  end
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
if op == 'held' then
  if ARGV[3] ~= '' and redis.call('GET', KEYS[3]) ~= ARGV[3] then
    return 0
  end
  local mark = '~' .. ARGV[2] .. '|' .. (epoch[1] or '')
  for i = 4, #ARGV do
    redis.call('HSET', KEYS[2], ARGV[i], mark)
  end
  return #ARGV - 3
end
if op ~= 'check' then
  return redis.error_reply('groups: unknown operation ' .. tostring(op))
end
if epoch[1] ~= ARGV[3] then
  return {'stale'}
end
if ARGV[4] == '-2' then
  local listed = redis.call('HGET', KEYS[2], ARGV[2]) or ''
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
