-- promote — up to ARGV[2] due jobs (score <= now) from `scheduled` to ready: to `pending` or its
-- lane at a fresh rank of its priority (the ring step). It answers, in the same step, how
-- long until the next scheduled job after them is due — the consumer bounds its park with it.
-- A missing row is dropped; a row not in state scheduled goes dead naming the defect, as does a
-- key of another type at the row's key.
-- Reads first (_lib.lua): the due ids, the next job due after them, their rows, the groups and the
-- flat set they join, then the writes.
--
-- KEYS[1] emq:{q}:scheduled   (zset, score = due ms)
-- KEYS[2] emq:{q}:pending     (zset, score = rank)
-- KEYS[3] emq:{q}:order       (hash: the ranking's clock and aging)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] limit (>= 1, the consumer's pump_batch)
--
-- Replies: {moved, ms until the next due job or -1 when none}; error EMQARGS.
-- Wakes: one per job made claimable (at most 16).
local scheduled = KEYS[1]
local base, limit = ARGV[1], tonumber(ARGV[2])
if not limit or limit < 1 then return emq_bad_args('promote', 'limit') end
-- the idle path: nothing scheduled, nothing to read the clock for
if #redis.call('ZRANGE', scheduled, '0', '0') == 0 then return {0, -1} end
local now = emq_now()
local due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now, 'LIMIT', '0', limit)
-- the due jobs are the set's first #due members: once they leave, the next one due is the member
-- ranked right after them
local head = redis.call('ZRANGE', scheduled, #due, #due, 'WITHSCORES')
local next_ms = -1
if head[2] then
  next_ms = tonumber(head[2]) - now
  if next_ms < 0 then next_ms = 0 end
end
if #due == 0 then return {0, next_ms} end
-- rows by pcall: a key of another type at a row's key is buried (its defect read here), never raised
local rows, lanes, order, flat, buried = {}, {}, {}, nil, false
for i, id in ipairs(due) do
  local jk = base .. 'job:' .. id
  local row = redis.pcall('HMGET', jk, 'state', 'group', 'waited', 'priority')
  if emq_foreign(row) then
    local defect, data = emq_foreign_read(base, id)
    row = { foreign = defect, data = data }
    buried = true
  else
    -- whether the payload is there, without copying it into Lua (it may be MiBs, times limit)
    row[5] = row[4]
    row[4] = row[3]
    row[3] = redis.call('HEXISTS', jk, 'data') == 1
    local state, g = row[1], row[2]
    if state == 'scheduled' and row[3] then
      if not g then
        if not flat then flat = emq_flat_read(base) end
      elseif not lanes[g] then
        -- groups in the order their first job came (pairs() order is undefined; the twin must match)
        order[#order + 1] = g
        emq_lane_read(lanes, base, g)
      end
    elseif state then
      buried = true
    end
  end
  rows[i] = row
end
local paused = emq_paused_read(base)
local touch = {}
if flat or #order > 0 then
  touch[#touch + 1] = 'ring'
  touch[#touch + 1] = 'wake'
end
local ranks = nil
if flat or #order > 0 then ranks = emq_order_read(base, now) end
if buried then
  touch[#touch + 1] = 'dead'
  touch[#touch + 1] = 'metrics:failed'
end
emq_touch(base, touch)

emq_bulk('ZREM', scheduled, due)
local moved, failed, nflat, added = 0, 0, 0, {}
for i, id in ipairs(due) do
  local row = rows[i]
  local state, g = row[1], row[2]
  if row.foreign then
    emq_bury_foreign(base, id, now, row.foreign, row.data)
    failed = failed + 1
  elseif state == 'scheduled' and row[3] then
    emq_ready(base, id, g, g and lanes[g] or flat, ranks, row[5])
    redis.call('HDEL', base .. 'job:' .. id, 'run_at')
    if g then added[g] = (added[g] or 0) + 1 else nflat = nflat + 1 end
    moved = moved + 1
  elseif state then
    emq_bury(base, id, now, 'malformed row: state ' .. state .. (row[3] and '' or ', no data') .. ' in scheduled')
    emq_notify(base, row[4], id)
    failed = failed + 1
  end
end
if ranks then emq_order_write(base, ranks) end
local wakes = nflat
if flat then emq_flat_step(base, flat) end
for _, g in ipairs(order) do wakes = wakes + emq_lane_step(base, g, lanes[g], added[g]) end
emq_wake(base, wakes, paused)
emq_count(base, 'failed', failed)
return {moved, next_ms}
