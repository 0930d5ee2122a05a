-- promote_job — an operator makes one scheduled job ready now (flat: pending at a fresh sequence;
-- lane: its tail and the ring step).
--
-- KEYS[1] emq:{q}:job:<id>    (hash, the row)
-- KEYS[2] emq:{q}:scheduled   (zset)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
--
-- Replies: 1 = promoted, 0 = not scheduled, -1 = gone.
-- Wakes: one when the job is claimable now.
local jk = KEYS[1]
local base, id = ARGV[1], ARGV[2]
local r = redis.call('HMGET', jk, 'state', 'group')
if not r[1] then return -1 end
if r[1] ~= 'scheduled' or redis.call('ZREM', KEYS[2], id) == 0 then return 0 end
local g = r[2]
emq_ready(base, id, g)
redis.call('HDEL', jk, 'run_at')
if g then
  emq_wake(base, emq_claimable(base, g, 1))
  emq_ring_step(base, g)
else
  emq_ring_step_flat(base)
  emq_wake(base, 1)
end
return 1
