-- pause_schedule — a schedule fires nothing, and misses nothing, until resumed: its due entry
-- removed and `paused` set. Its slots stay until resume replaces them.
--
-- KEYS[1] emq:{q}:schedule:<name> (hash)
-- KEYS[2] emq:{q}:schedule_due   (zset)
-- ARGV[1] the schedule's name
--
-- Replies: 1 paused (or already paused), 0 no such schedule.
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
-- the due set is only written: reached before the first write
redis.call('EXISTS', KEYS[2])
redis.call('HSET', KEYS[1], 'paused', '1')
redis.call('ZREM', KEYS[2], ARGV[1])
return 1
