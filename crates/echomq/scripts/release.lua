-- release — fenced: the holder gives the job back without using an attempt (a worker stopping, a
-- job of a kind its worker does not run). The row's `free` + 1, so the attempts it has used
-- (attempts - free), which its budget counts and a user sees, are those before the claim; its
-- attempts — the fencing token — stay, so the released holder's late settle is refused as stale.
-- Delay 0: ready at once at the front of its set (flat: pending at score 0, where recovered jobs
-- go; a lane job: its lane's head); else scheduled until now + delay (ahead of every other job
-- scheduled, it wakes the parked consumers: emq_due_wake). A lane job frees its slot
-- with the ring step. A wake per job made claimable. Reads first (lib/keys.lua).
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- KEYS[3] emq:{q}:scheduled   (zset, score = due ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] the attempts token
-- ARGV[4] delay ms (a whole number below 2^53)
--
-- Replies: 1 = released, 0 = stale, -1 = gone; error EMQARGS.
local active, jk, scheduled = KEYS[1], KEYS[2], KEYS[3]
local base, id, token, delay = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not emq_whole(delay, 0) then return emq_bad_args('release', 'delay') end
local refused, g, r = emq_fence(jk, token, 'free', 'kind')
if refused then return refused end
local lanes, flat, kind = {}, nil, r[4] or ''
local touch = { 'ring', 'wake', 'wake_any' }
if g then
  emq_lane_read(lanes, base, g, true)
elseif delay == 0 then
  flat = emq_flat_read(base)
  emq_flat_touch(touch, flat, kind)
end
local paused = emq_paused_read(base)
local head = nil
if delay > 0 then head = emq_due_read(base) end
emq_touch(base, touch)
if redis.call('ZREM', active, id) == 0 then return 0 end
-- a malformed count (by hand) starts again from 0
redis.call('HSET', jk, 'free', (tonumber(r[3]) or 0) + 1)
local wakes, wake_kind = 0, nil
if delay > 0 then
  local due = emq_now() + delay
  redis.call('HSET', jk, 'state', 'scheduled', 'run_at', due)
  redis.call('ZADD', scheduled, due, id)
  emq_due_wake(base, head, due, paused)
  if g then wakes = emq_lane_leave(base, g, lanes[g]) end
elseif g then
  emq_lane_front(base, g, lanes[g], id)
  emq_lane_leave(base, g, lanes[g])
  wakes = 1
else
  emq_flat_ready(base, flat, id, 0, kind)
  emq_flat_step(base, flat)
  wakes, wake_kind = 1, kind
end
emq_wake(base, wakes, paused, wake_kind)
return 1
