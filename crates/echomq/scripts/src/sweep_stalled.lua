-- sweep_stalled — the count-thresholded stalled sweep, a self-contained file: a raw EVAL of it runs
-- with the KEYS, ARGV and reply below.
-- Every active member whose lease lapsed (score <= now, server clock), at most ARGV[3]: its `stalled`
-- count +1; at or above ARGV[2] it goes dead (last_error "stalled", metrics failed), else back to
-- ready (metrics stalled): pending or its lane at rank 0, the front (recovered jobs ordered by id
-- among themselves). A lane job frees its group's slot (the ring step; a wake per recovered
-- job, and one when a dead-lettered lane job put its group back on the ring); a missing row is
-- dropped from active and reported neither way; a key of another type at a row's key (only by
-- hand) becomes a dead row naming the defect (a string's bytes kept as its data; its group, so its
-- slot, unknown), reported dead, metrics failed; the morgue is scored with the server's time of
-- death; a job a caller waits on (its row's `waited` mark) that goes dead has its id published on
-- emq:{q}:finished.
-- Reads first: Redis keeps the writes of a script that fails half-way, and a key a Cluster is
-- migrating can be refused at any call, so the sweep reads the lapsed ids, every row, each group's
-- fields and lane, the flat set's ring flag and whether the queue is paused, and reaches the keys
-- it only writes with one EXISTS, before its first write.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:pending     (zset, score = rank; recovered jobs 0)
-- KEYS[3] emq:{q}:dead        (zset, score = time of death ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] max_stalled (>= 1; 1 = dead at the first stall)
-- ARGV[3] limit (>= 1)
--
-- Replies: {recovered ids, dead ids}; error EMQARGS.

local active = KEYS[1]
local base = ARGV[1]
local maxst, lim = tonumber(ARGV[2]), tonumber(ARGV[3])
if not maxst or maxst < 1 or not lim or lim < 1 then
  return redis.error_reply('EMQARGS sweep_stalled: max_stalled and limit must be >= 1')
end
local now = emq_now()
local exp = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, lim)

-- The reads. rows[i]: {state, group, stalled, waited, kind} (state nil: a missing row, dropped), or for
-- a key of another type {foreign = its defect, data = a string's bytes} (emq_row_read); lanes[g]
-- (emq_lane_read) and flat (emq_flat_read, read when a flat job may recover), kept up to date by
-- the writes below.
local rows, lanes, flat, kinds = {}, {}, nil, {}
local dies, recovers, laned = false, false, false
for i, id in ipairs(exp) do
  local row = emq_row_read(base, id, 'state', 'group', 'stalled', 'waited', 'kind')
  if row.foreign then
    dies = true
  elseif row[1] then
    local g = row[2]
    if (tonumber(row[3]) or 0) + 1 >= maxst then dies = true else recovers = true end
    if g then
      emq_lane_read(lanes, base, g, true)
      laned = true
    else
      if not flat then flat = emq_flat_read(base) end
      kinds[row[5] or ''] = true
    end
  end
  rows[i] = row
end
local paused = emq_paused_read(base)
-- the keys only written below
local touch = {}
if dies then
  touch[#touch + 1] = 'dead'
  touch[#touch + 1] = 'metrics:failed'
end
if recovers then
  touch[#touch + 1] = 'pending'
  touch[#touch + 1] = 'metrics:stalled'
  for k in pairs(kinds) do emq_flat_touch(touch, flat, k) end
end
if recovers or laned then
  touch[#touch + 1] = 'ring'
  emq_wake_touch(touch)
end
emq_touch(base, touch)

-- The writes, walked backwards; the reply lists are put back in lapse order below
local recovered, buried = {}, {}
local flat_back, w = false, emq_wakes()
for i = #exp, 1, -1 do
  local id = exp[i]
  redis.call('ZREM', active, id)
  local row = rows[i]
  if row.foreign then
    emq_bury_foreign(base, id, now, row.foreign, row.data)
    buried[#buried + 1] = id
  elseif row[1] then
    local g = row[2]
    local stalls = (tonumber(row[3]) or 0) + 1
    redis.call('HSET', base .. 'job:' .. id, 'stalled', stalls)
    if stalls >= maxst then
      emq_bury(base, id, now, 'stalled')
      buried[#buried + 1] = id
      emq_notify(base, row[4], id)
      -- the slot invariant, and the ring step: the freed slot may make the lane's next job claimable
      if g then emq_wakes_add(w, nil, emq_lane_leave(base, g, lanes[g])) end
    else
      if g then
        emq_lane_front(base, g, lanes[g], id)
        emq_lane_leave(base, g, lanes[g])
        emq_wakes_add(w, nil, 1)
      else
        emq_flat_ready(base, flat, id, 0, row[5])
        emq_wakes_add(w, row[5] or '', 1)
        flat_back = true
      end
      recovered[#recovered + 1] = id
    end
  end
end
if flat_back then emq_flat_step(base, flat) end
emq_count(base, 'failed', #buried, now)
emq_count(base, 'stalled', #recovered, now)
emq_wakes_push(base, w, paused)
local function reversed(list)
  local out = {}
  for i = #list, 1, -1 do out[#out + 1] = list[i] end
  return out
end
return {reversed(recovered), reversed(buried)}
