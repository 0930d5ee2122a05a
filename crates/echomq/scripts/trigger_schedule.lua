-- trigger_schedule — one job of a schedule's template now, outside its slots: its id
-- `sched:<name>:run<n>` takes the next value of the queue's id counter, so it never meets a
-- slot's id or another trigger's (a value whose id a caller gave a job of its own is passed over,
-- the next 16 at most). It becomes the schedule's last job (the overlap policy waits
-- for it); the slots and counts are untouched.
-- Reads first (lib/keys.lua): the mark, the template, the id counter, the set the job joins and the
-- ranking, then the writes (the counter's INCR first).
--
-- KEYS[1] emq:{q}:schedule:<name> (hash)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] the schedule's name
--
-- Replies: the job's id, or nil for no such schedule; errors EMQOBLITERATING, EMQARGS (the next 16
-- trigger ids all taken by callers' jobs).
-- Wakes: one when the job is claimable.
local key = KEYS[1]
local base, name = ARGV[1], ARGV[2]
if redis.call('EXISTS', base .. 'obliterating') == 1 then
  return redis.error_reply('EMQOBLITERATING the queue is being obliterated')
end
if redis.call('EXISTS', key) == 0 then return false end
local t = emq_template_read(key)
-- the next counter values in turn, past any a caller took as its own id (at most 16)
local counter, step, id = tonumber(redis.call('GET', base .. 'id')) or 0, nil, nil
for k = 1, 16 do
  local candidate = string.format('sched:%s:run%d', name, counter + k)
  if redis.call('EXISTS', base .. 'job:' .. candidate) == 0 then
    step, id = k, candidate
    break
  end
end
if not id then return emq_bad_args('trigger_schedule', 'the next 16 trigger ids are taken') end
local lanes, s = {}, nil
if t.g then s = emq_lane_read(lanes, base, t.g, true) else s = emq_flat_read(base) end
local paused = emq_paused_read(base)
local now = emq_now()
local touch = { 'job:' .. id, 'ring', 'wake', 'wake_any' }
if not t.g then emq_flat_touch(touch, s, t.kind) end
local order = emq_order_read(base, now, touch)
emq_touch(base, touch)

redis.call('INCRBY', base .. 'id', step)
emq_fire(base, id, t, s, order)
emq_order_write(base, order)
if t.g then
  emq_wake(base, emq_lane_step(base, t.g, s, 1), paused)
else
  emq_flat_step(base, s)
  emq_wake(base, 1, paused, t.kind)
end
redis.call('HSET', key, 'last_job', id, 'last_fire', now)
return id
