-- upsert_schedule — a schedule created, or changed in place: its definition (the timing text and
-- zone, the job template, the misfire and overlap policies, the grace) written over the old one,
-- and its next slots (computed by the client from the timing: the store never parses cron)
-- replacing the old ones (emq_schedule_slots_write: a slot already decided never fires again, and
-- the old slots already due but not decided are kept with the count of missed ones). The
-- version comes from the queue's id counter, so it rises across a remove and a new upsert of the
-- name too: a refill computed from an earlier definition is refused. The counts, the last fire and
-- whether it is paused are kept. A new queue's registration is owed as an enqueue's is.
-- Reads first (lib/keys.lua): the mark, the schedule's last decided slot and pause, the registration,
-- whether the queue is paused, then the writes (the counter's INCR first).
--
-- KEYS[1] emq:{q}:schedule:<name> (hash)
-- KEYS[2] emq:{q}:schedules      (zset: every schedule's name, score 0)
-- KEYS[3] emq:{q}:schedule_due   (zset: name -> its next slot, ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] the schedule's name
-- ARGV[3] n, the definition's fields, then n field/value pairs
-- ARGV[4 + 2n]… the next slots, Unix ms, ascending (at least one)
--
-- Replies: {version, registration owed (nil when none)}; errors EMQARGS, EMQOBLITERATING.
-- Wakes: one, so a parked consumer bounds its park by the new first slot.
local key, schedules = KEYS[1], KEYS[2]
local base, name, n = ARGV[1], ARGV[2], tonumber(ARGV[3])
if not emq_whole(n, 1) or #ARGV < 4 + 2 * n then return emq_bad_args('upsert_schedule', 'shape') end
for i = 4 + 2 * n, #ARGV do
  if not emq_whole(tonumber(ARGV[i]), 0) then return emq_bad_args('upsert_schedule', 'slot') end
end
if redis.call('EXISTS', base .. 'obliterating') == 1 then
  return redis.error_reply('EMQOBLITERATING the queue is being obliterated')
end
local old = redis.call('HMGET', key, 'last_slot', 'paused', 'slots', 'backlog')
local owed, fresh_life = emq_registration_read(base)
local queue_paused = emq_paused_read(base)
local now = emq_now()
emq_touch(base, { 'schedules', 'schedule_due', 'wake', 'wake_any' })

local version = redis.call('INCR', base .. 'id')
local def = {}
for i = 4, 3 + 2 * n do def[#def + 1] = ARGV[i] end
redis.call('HSET', key, unpack(def))
local paused = old[2] == '1'
local carry = { slots = old[3], backlog = old[4] }
emq_schedule_slots_write(base, key, name, 4 + 2 * n, tonumber(old[1]), now, paused, version, carry)
redis.call('ZADD', schedules, 0, name)
if not paused then emq_wake(base, 1, queue_paused) end
emq_registration_write(base, owed, fresh_life)
return { version, owed }
