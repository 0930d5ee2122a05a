-- set_group_limit — a group's own limit (l:<g>) or the queue default (l:~, for groups without their
-- own; absent = 1). For one group, the ring step runs at once (a raise can make it eligible) with a
-- wake per job the new slots let be claimed; a raised default reaches a group at its next settle.
-- A lowered limit never preempts: claims stop until the group's active count is below it.
--
-- KEYS[1] emq:{q}:groups      (hash)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] the group, or '' for the queue default
-- ARGV[3] limit (>= 1)
--
-- Replies: 1; error EMQARGS.
local base, g, limit = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not limit or limit < 1 or limit ~= math.floor(limit) then return emq_bad_args('set_group_limit', 'limit') end
if g == '' then
  redis.call('HSET', KEYS[1], 'l:~', limit)
  return 1
end
redis.call('HSET', KEYS[1], 'l:' .. g, limit)
if emq_ring_step(base, g) == 1 then
  emq_wake(base, emq_claimable(base, g, redis.call('LLEN', base .. 'lane:' .. g)))
end
return 1
