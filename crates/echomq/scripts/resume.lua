-- resume — claims give jobs again; wakes parked consumers, one token per ready ring member or flat
-- job (at most 16).
--
-- KEYS[1] emq:{q}:paused      (string)
-- KEYS[2] emq:{q}:pending     (zset)
-- KEYS[3] emq:{q}:ring        (list of ring members)
-- ARGV[1] the queue base emq:{q}:
--
-- Replies: 1.
local was = redis.call('DEL', KEYS[1])
if was == 1 then
  emq_wake(ARGV[1], math.min(16, redis.call('ZCARD', KEYS[2]) + redis.call('LLEN', KEYS[3])))
end
return 1
