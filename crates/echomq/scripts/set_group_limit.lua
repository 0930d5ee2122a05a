-- set_group_limit — a group's own limit (l:<g>) or the queue default (l:~, for groups without their
-- own; absent = 1). For one group, the ring step runs at once (a raise can make it eligible) with a
-- wake per job the new slots let be claimed (also when the group was already on the ring with a
-- slot free); a raised default reaches a group at its next settle.
-- A lowered limit never preempts: claims stop until the group's active count is below it.
-- Reads first (lib/keys.lua): the group's fields and lane, then the writes.
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
local s = emq_lane_read({}, base, g)
local paused = emq_paused_read(base)
emq_touch(base, { 'ring', 'wake', 'wake_any' })
-- the jobs of g claimable under a limit: its ready jobs, bounded by the free slots
local function claimable(l)
  local free = l - s.a
  if free < 0 then free = 0 end
  return math.min(s.len, free)
end
local old = s.limit
redis.call('HSET', KEYS[1], 'l:' .. g, limit)
s.limit = limit
emq_lane_ring(base, g, s)
-- one wake per job the raise made claimable, whether or not g was already on the ring
emq_wake(base, claimable(limit) - claimable(old), paused)
return 1
