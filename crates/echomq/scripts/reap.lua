-- reap — recovery without a token, guarded by the lease deadline: up to ARGV[2] active jobs whose
-- lease lapsed (score <= now) go back to ready at the front — to `pending` or its lane at rank 0
-- (recovered jobs ordered by id among themselves; a lane job's slot freed, the ring step); metrics
-- reaped.
-- The attempt: every claim uses one. Without ARGV[3] a lapsed lease has used the attempt its claim
-- took, and claim buries a job with none left ("lease expired on the last attempt"): a job that
-- kills its worker cannot loop for ever. With ARGV[3] = max_redeliveries, lapses have a budget of
-- their own: each gives its claim's attempt back (free + 1, so only handler failures spend
-- max_attempts) and is counted (stalled + 1); a job whose count passes max_redeliveries goes dead
-- instead, "lease lapsed N times: its worker died or stalled each time" (metrics failed, a waited
-- job's id published, a lane job's slot freed).
-- A missing row is dropped from `active`; a row not in state active goes dead naming the defect, as
-- does a key of another type at the row's key (its slot, if any, stays: its group is unknown).
-- Reads first (lib/keys.lua): the lapsed ids, their rows, their groups and the flat set, then the writes.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:pending     (zset, score = rank; recovered jobs 0)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] limit (>= 1)
-- ARGV[3] max_redeliveries (>= 1), or '' / absent: none (a lapse keeps its attempt used)
--
-- Replies: the number of jobs returned to ready; error EMQARGS.
-- Wakes: one per job returned to ready, and one per group a dead-lettered lane job put back on the
-- ring (at most 16).
local active = KEYS[1]
local base, limit = ARGV[1], tonumber(ARGV[2])
if not limit or limit < 1 then return emq_bad_args('reap', 'limit') end
-- nil: no redelivery budget
local budget = nil
if ARGV[3] and ARGV[3] ~= '' then
  budget = tonumber(ARGV[3])
  if not emq_whole(budget, 1) then return emq_bad_args('reap', 'max_redeliveries') end
end
-- the idle path (an idle consumer's beat, a lease not yet lapsed): the earliest deadline alone
local head = tonumber(redis.call('ZRANGE', active, 0, 0, 'WITHSCORES')[2])
if not head then return 0 end
local now = emq_now()
if head > now then return 0 end
local lapsed = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', '0', limit)
if #lapsed == 0 then return 0 end
-- rows by emq_row_read: a key of another type at a row's key is buried (its defect read here)
local rows, lanes, flat, buried, kinds = {}, {}, nil, false, {}
for i, id in ipairs(lapsed) do
  local row = emq_row_read(base, id, 'state', 'group', 'waited', 'stalled', 'free', 'kind')
  if row.foreign then
    buried = true
  else
    local state, g = row[1], row[2]
    if g then emq_lane_read(lanes, base, g, true) end
    if state == 'active' and not g then
      if not flat then flat = emq_flat_read(base) end
      kinds[row[6] or ''] = true
    end
    if state and state ~= 'active' then buried = true end
    -- the lapses counted with this one; past the budget the job goes dead
    if budget and state == 'active' then
      row.lapses = math.floor(tonumber(row[4]) or 0) + 1
      if row.lapses > budget then buried = true end
    end
  end
  rows[i] = row
end
local paused = emq_paused_read(base)
local touch = { 'ring', 'wake', 'wake_any', 'metrics:reaped' }
for k in pairs(kinds) do emq_flat_touch(touch, flat, k) end
if buried then
  touch[#touch + 1] = 'dead'
  touch[#touch + 1] = 'metrics:failed'
end
emq_touch(base, touch)

emq_bulk('ZREM', active, lapsed)
local back, failed, w = 0, 0, emq_wakes()
for i = #lapsed, 1, -1 do
  local id = lapsed[i]
  local row = rows[i]
  local state, g = row[1], row[2]
  if row.foreign then
    emq_bury_foreign(base, id, now, row.foreign, row.data)
    failed = failed + 1
  elseif state == 'active' and row.lapses and row.lapses > budget then
    -- the lapse used no attempt (the budget counts it instead): the dead row's attempts are its
    -- handler's failures alone
    redis.call('HSET', base .. 'job:' .. id, 'stalled', row.lapses, 'free', (tonumber(row[5]) or 0) + 1)
    emq_bury(base, id, now, 'lease lapsed ' .. row.lapses .. ' times: its worker died or stalled each time')
    emq_notify(base, row[3], id)
    if g then emq_wakes_add(w, nil, emq_lane_leave(base, g, lanes[g])) end
    failed = failed + 1
  elseif state == 'active' then
    -- under a budget: the attempt given back and the lapse counted, before the row turns pending
    if row.lapses then
      redis.call('HSET', base .. 'job:' .. id, 'stalled', row.lapses, 'free', (tonumber(row[5]) or 0) + 1)
    end
    if g then
      emq_lane_front(base, g, lanes[g], id)
      emq_lane_leave(base, g, lanes[g])
      emq_wakes_add(w, nil, 1)
    else
      emq_flat_ready(base, flat, id, 0, row[6])
      emq_wakes_add(w, row[6] or '', 1)
    end
    back = back + 1
  elseif state then
    emq_bury(base, id, now, emq_misplaced(state, 'active'))
    emq_notify(base, row[3], id)
    -- the slot invariant, and the ring step: the freed slot may make the lane's next job claimable
    if g then emq_wakes_add(w, nil, emq_lane_leave(base, g, lanes[g])) end
    failed = failed + 1
  end
end
if flat then emq_flat_step(base, flat) end
emq_wakes_push(base, w, paused)
emq_count(base, 'failed', failed, now)
emq_count(base, 'reaped', back, now)
return back
