-- resume_schedule — a paused schedule fires again from its next slot after now: the slots it held
-- are dropped under a new version (emq_schedule_slots_write, given none: its cursor now), so the
-- slots that passed while it was paused are neither fired nor counted missed; the next beat finds
-- it with no slot and asks for a refill, which lists the slots after now (those still within the
-- grace fire on time).
-- Reads first (lib/keys.lua): the schedule's last decided slot, whether the queue is paused, then the
-- writes (the counter's INCR first).
--
-- KEYS[1] emq:{q}:schedule:<name> (hash)
-- KEYS[2] emq:{q}:schedule_due   (zset)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] the schedule's name
--
-- Replies: 1 resumed (or not paused: then nothing changes), 0 no such schedule.
-- Wakes: one, so a parked consumer bounds its park by the new first slot.
local key = KEYS[1]
local base, name = ARGV[1], ARGV[2]
local old = redis.call('HMGET', key, 'last_slot', 'paused', 'timing')
if not old[3] then return 0 end
if old[2] ~= '1' then return 1 end
local queue_paused = emq_paused_read(base)
local now = emq_now()
emq_touch(base, { 'schedule_due', 'wake', 'wake_any' })
local version = redis.call('INCR', base .. 'id')
redis.call('HDEL', key, 'paused')
emq_schedule_slots_write(base, key, name, 3, tonumber(old[1]), now, false, version)
emq_wake(base, 1, queue_paused)
return 1
