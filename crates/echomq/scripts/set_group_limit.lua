-- set_group_limit — a group's own limit (l:<g>) or the queue default (l:~, for groups without their
-- own; absent = 1). For one group, the ring step runs at once (a raise can make it eligible) with a
-- wake per job the new slots let be claimed (also when the group was already on the ring with a
-- slot free); a raised default reaches a group at its next settle.
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
-- the jobs of g claimable under a limit: its ready jobs, bounded by the free slots
local active, old = emq_slots(base, g)
local ready = redis.call('LLEN', base .. 'lane:' .. g)
local function claimable(l)
  local free = l - active
  if free < 0 then free = 0 end
  return math.min(ready, free)
end
redis.call('HSET', KEYS[1], 'l:' .. g, limit)
emq_ring_step(base, g)
-- one wake per job the raise made claimable, whether or not g was already on the ring
emq_wake(base, claimable(limit) - claimable(old))
return 1
