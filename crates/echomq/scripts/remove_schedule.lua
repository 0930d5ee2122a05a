-- remove_schedule — a schedule deleted: its definition and state, its name and its due entry. Jobs
-- it fired stay. A new upsert of the name starts afresh (its counts at 0; its version still rises,
-- from the queue's id counter).
--
-- KEYS[1] emq:{q}:schedule:<name> (hash)
-- KEYS[2] emq:{q}:schedules      (zset)
-- KEYS[3] emq:{q}:schedule_due   (zset)
-- ARGV[1] the schedule's name
--
-- Replies: 1 removed, 0 no such schedule.
local name = ARGV[1]
local existed = redis.call('ZSCORE', KEYS[2], name)
-- the due set is only written: reached before the first write
redis.call('EXISTS', KEYS[3])
redis.call('DEL', KEYS[1])
redis.call('ZREM', KEYS[2], name)
redis.call('ZREM', KEYS[3], name)
if existed then return 1 end
return 0
