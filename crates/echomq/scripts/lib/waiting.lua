-- lib/waiting.lua — A waiting job (pending or scheduled) taken out of where it waits: where it
-- waits read before the first write, then its removal with the lanes' count and the pending tally
-- kept.

-- where a waiting job (pending or scheduled) waits, read before the first write: w.key, the key
-- (a suffix of the queue base; a lane by emq_lane_len, which converts one an earlier version
-- wrote) for emq_touch and emq_unwait; for a lane, w.lj, the count of the lanes' jobs
-- (emq_lane_jobs_of); for a pending job, w.left, the pending tally of its leaving (its rank and
-- priority read, the tally's keys reached) and w.by_kind, its kind's set (lib/ring.lua), reached
local function emq_waits_in_read(base, state, g, id)
  if state == 'scheduled' then return { key = 'scheduled' } end
  local w = { key = 'pending' }
  if g then
    emq_lane_len(base, g)
    w.key = 'lane:' .. g
    w.lj = emq_lane_jobs_of(base, redis.call('HGET', base .. 'groups', 'lane_jobs'))
    -- the kind the claims keep of g's head (hk:<g>, lib/ring.lua's claim), when it is this job's
    local hk = redis.call('HGET', base .. 'groups', 'hk:' .. g)
    if hk and string.sub(hk, 1, #id + 1) == id .. ' ' then w.hk = 'hk:' .. g end
  end
  local rank = tonumber(redis.call('ZSCORE', base .. w.key, id))
  if rank then
    local f = redis.call('HMGET', base .. 'job:' .. id, 'priority', 'kind')
    w.left = emq_tally_new()
    emq_tally(w.left, rank, tonumber(f[1]) or 0, -1)
    local touch = emq_tally_touch({})
    if not g then
      w.by_kind = 'pending:' .. (f[2] or '')
      touch[#touch + 1] = w.by_kind
    end
    emq_touch(base, touch)
  end
  return w
end

-- a waiting job taken out of where it waits (w: emq_waits_in_read's); false when the row says it
-- waits but it is not there
local function emq_unwait(base, id, w)
  local gone = redis.call('ZREM', base .. w.key, id) == 1
  if gone and w.by_kind then redis.call('ZREM', base .. w.by_kind, id) end
  -- a head that leaves its lane takes the kind kept of it along: its id may come again
  if gone and w.hk then redis.call('HDEL', base .. 'groups', w.hk) end
  if gone and w.lj then emq_lane_jobs_add(base, w.lj, -1) end
  if gone and w.left then emq_tally_write(base, w.left) end
  return gone
end
