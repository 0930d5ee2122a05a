-- reap — recovery without a token, guarded by the lease deadline: up to ARGV[2] active jobs whose
-- lease lapsed (score <= now) go back to ready at the front — flat to `pending` at score 0, a lane
-- job to its lane's head, recovered jobs of one lane in the order their leases lapsed (its slot
-- freed, the ring step). No stall counting (metrics reaped).
-- A missing row is dropped from `active`; a row not in state active goes dead naming the defect, as
-- does a key of another type at the row's key (emq_bury_foreign: its slot, if any, stays).
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:pending     (zset, score = sequence; recovered jobs 0)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] limit (>= 1)
--
-- Replies: the number of jobs returned to ready; error EMQARGS.
-- Wakes: one per job returned to ready, and one per group a dead-lettered lane job put back on the
-- ring (at most 16).
local active, pending = KEYS[1], KEYS[2]
local base, limit = ARGV[1], tonumber(ARGV[2])
if not limit or limit < 1 then return emq_bad_args('reap', 'limit') end
-- nothing held, nothing lapsed: the idle beat's reap is this one call (the lowest member is the
-- reserved one, scored +inf, only when no job is held)
local head = redis.call('ZRANGE', active, '0', '0')
if #head == 0 or head[1] == emq_active_pin() then return 0 end
local now = emq_now()
local lapsed = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', '0', limit)
if #lapsed == 0 then return 0 end
local rows = {}
-- by pcall: a key of another type at a row's key is buried below (false here), never raised
for i, id in ipairs(lapsed) do
  local row = redis.pcall('HMGET', base .. 'job:' .. id, 'state', 'group')
  if emq_foreign(row) then row = false end
  rows[i] = row
end
emq_bulk('ZREM', active, lapsed)
emq_bulk('SREM', base .. 'reclaimed', lapsed)
-- walked backwards: each LPUSH puts a job ahead of the one lapsed after it, so recovered lane jobs
-- keep their order at the lane's front
local back, freed, flat = 0, 0, false
for i = #lapsed, 1, -1 do
  local id = lapsed[i]
  local row = rows[i]
  local state, g = row and row[1], row and row[2]
  if not row then
    emq_bury_foreign(base, id, now)
    emq_count(base, 'failed', 1)
  elseif state == 'active' then
    redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
    if g then
      redis.call('LPUSH', base .. 'lane:' .. g, id)
      emq_release(base, g)
    else
      redis.call('ZADD', pending, '0', id)
      flat = true
    end
    back = back + 1
  elseif state then
    emq_bury(base, id, now, 'malformed row: state ' .. state .. ' in active')
    -- the slot invariant, and the ring step: the freed slot may make the lane's next job claimable
    if g then freed = freed + emq_release(base, g) end
    emq_count(base, 'failed', 1)
  end
end
if flat then emq_ring_step_flat(base) end
emq_wake(base, back + freed)
emq_count(base, 'reaped', back)
return back
