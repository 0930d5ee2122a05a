-- promote_job — an operator makes one scheduled job ready now (pending or its lane at a fresh rank
-- of its priority; the ring step).
--
-- KEYS[1] emq:{q}:job:<id>    (hash, the row)
-- KEYS[2] emq:{q}:scheduled   (zset)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
--
-- Replies: 1 = promoted, 0 = not scheduled, -1 = gone.
-- Wakes: one when the job is claimable now.
-- Reads first (lib/keys.lua): the row, its group or the flat set, then the writes.
local jk = KEYS[1]
local base, id = ARGV[1], ARGV[2]
local r = redis.call('HMGET', jk, 'state', 'group', 'priority', 'kind')
if not r[1] then return -1 end
if r[1] ~= 'scheduled' then return 0 end
local g = r[2]
local lanes, flat = {}, nil
local touch = { 'ring', 'wake', 'wake_any' }
if g then
  emq_lane_read(lanes, base, g, true)
else
  flat = emq_flat_read(base)
  emq_flat_touch(touch, flat, r[4] or '')
end
local paused = emq_paused_read(base)
local ranks = emq_order_read(base, emq_now(), touch)
emq_touch(base, touch)
-- the membership test is the reply of the ZREM the move needs anyway (nothing written on 0)
if redis.call('ZREM', KEYS[2], id) == 0 then return 0 end
emq_ready(base, id, g, g and lanes[g] or flat, ranks, r[3], r[4])
emq_order_write(base, ranks)
redis.call('HDEL', jk, 'run_at')
if g then
  emq_wake(base, emq_lane_step(base, g, lanes[g], 1), paused)
else
  emq_flat_step(base, flat)
  emq_wake(base, 1, paused, r[4] or '')
end
return 1
