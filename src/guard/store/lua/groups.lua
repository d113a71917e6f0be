-- groups: the store's list of slot groups (groups.rs). KEYS[1] = the store's epoch, KEYS[2]
-- = the list (a hash: group tag -> the generation it was listed under). A group is listed
-- only after its copy of the epoch was written (join_group), so a group listed under a
-- generation had its copy then.
--   check tag generation code -> {'stale'} when the store's epoch is not of `generation`;
--                                {'lost'} when `code` is -2 (the group's copy of the epoch
--                                was missing or of another process when the reserve looked)
--                                and the group is listed under `generation`, or marked held
--                                at its recovery (`~<generation>`: its master lost it, unless
--                                another guard joined it since that look: the caller reads the
--                                copy again); else {'join', the epoch's w or '0'} (the
--                                caller then writes the group's copy, then lists it).
--   list tag generation       -> lists the group under `generation` if the store's epoch is
--                                still of it (1), else nothing (0).
--   held generation tag...    -> a recovery that wrote `generation` found these groups'
--                                copies there and of their masters' processes just before
--                                (group_sweep.rs): each not listed under `generation` is
--                                listed as `~<generation>`, so a copy missing later is a loss
--                                under it; nothing if the store's epoch is not of it. Answers
--                                how many it marked.
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
  if epoch[1] ~= ARGV[2] then
    return 0
  end
  local marked = 0
  for i = 3, #ARGV do
    if redis.call('HGET', KEYS[2], ARGV[i]) ~= ARGV[2] then
      redis.call('HSET', KEYS[2], ARGV[i], '~' .. ARGV[2])
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
  local listed = redis.call('HGET', KEYS[2], ARGV[2])
  if listed == ARGV[3] or listed == '~' .. ARGV[3] then
    return {'lost'}
  end
end
return {'join', epoch[2] or '0'}
