-- resume — claims give jobs again; wakes parked consumers, one token per job made claimable (at
-- most 16 a list: lib/wake.lua): the flat set's jobs, by kind (each kind's count from its set,
-- the set `kinds` naming them; a queue whose sets by kind are not yet whole wakes for `pending` as
-- a whole), and per group on the ring its ready jobs its free slots let be claimed. Only the ring's first 16 members are read (never a scan): each eligible member gives at
-- least one job and no more than 16 tokens are pushed, so the rest cannot change the count — unless
-- stale members (a lane an operator emptied) sit among the first 16; a wake is a hint, so then a
-- consumer finds the rest at its next beat.
-- Resuming a queue that is not paused makes nothing claimable: no wake.
-- Reads first (lib/keys.lua): the ring's head, the flat set and its groups, then the writes.
--
-- KEYS[1] emq:{q}:paused      (string)
-- KEYS[2] emq:{q}:pending     (zset)
-- KEYS[3] emq:{q}:ring        (list of ring members)
-- ARGV[1] the queue base emq:{q}:
--
-- Replies: 1.
local paused, pending, ring = KEYS[1], KEYS[2], KEYS[3]
local base = ARGV[1]
if redis.call('EXISTS', paused) == 0 then return 1 end
local claimable, lanes, w, touch = 0, {}, emq_wakes(), { 'wake', 'wake_any' }
for _, m in ipairs(redis.call('LRANGE', ring, 0, 15)) do
  if claimable >= 16 then break end
  if m == '~' then
    if redis.call('HEXISTS', base .. 'groups', 'by_kind') == 1 then
      for _, k in ipairs(redis.call('SMEMBERS', base .. 'kinds')) do
        local n = redis.call('ZCARD', base .. 'pending:' .. k)
        if n > 0 then
          emq_wakes_add(w, k, n)
          emq_wake_touch(touch, k)
          claimable = claimable + n
        end
      end
    else
      local n = redis.call('ZCARD', pending)
      emq_wakes_add(w, nil, n)
      claimable = claimable + n
    end
  else
    -- its ready jobs, bounded by its free slots
    local s = emq_lane_read(lanes, base, m)
    local free = s.limit - s.a
    if free < 0 then free = 0 end
    emq_wakes_add(w, nil, math.min(s.len, free))
    claimable = claimable + math.min(s.len, free)
  end
end
emq_touch(base, touch)
redis.call('DEL', paused)
emq_wakes_push(base, w, false)
return 1
