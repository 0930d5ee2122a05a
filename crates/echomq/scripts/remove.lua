-- remove — an operator deletes a job wherever it is (a waited job's id published: its waiter
-- learns it is gone). An active job only with force (then its lane
-- slot is freed and the ring step runs, keeping the slot invariant).
-- Reads first (lib/keys.lua): the row and, for a forced lane job, its group; then the writes: first the
-- membership the job leaves (its key the only one not reached before), then the row.
--
-- KEYS[1] emq:{q}:job:<id>    (hash, the row)
-- KEYS[2] emq:{q}:active      (zset)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] force (1/0)
--
-- Replies: 1 = removed, -1 = gone, 0 = active and not forced (nothing done).
local jk, active = KEYS[1], KEYS[2]
local base, id, force = ARGV[1], ARGV[2], ARGV[3] == '1'
local r = redis.call('HMGET', jk, 'state', 'group', 'waited')
local state, g = r[1], r[2]
if not state then return -1 end
if state == 'active' then
  if not force then return 0 end
  local lanes, paused = {}, false
  if g then
    emq_lane_read(lanes, base, g)
    paused = emq_paused_read(base)
    emq_touch(base, { 'ring', 'wake', 'wake_any' })
  end
  if redis.call('ZREM', active, id) == 1 and g then
    emq_wake(base, emq_lane_leave(base, g, lanes[g]), paused)
  end
elseif state == 'pending' or state == 'scheduled' then
  emq_unwait(base, id, emq_waits_in_read(base, state, g, id))
elseif state == 'dead' then
  redis.call('ZREM', base .. 'dead', id)
else
  -- a finished row (an earlier version kept cancelled rows in `completed` too)
  redis.call('ZREM', base .. 'completed', id)
  if state == 'cancelled' then redis.call('ZREM', base .. 'cancelled', id) end
end
redis.call('DEL', jk)
if r[3] then redis.call('PUBLISH', base .. 'finished', id) end
return 1
