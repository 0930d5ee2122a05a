-- promote — up to ARGV[2] due jobs (score <= now) from `scheduled` to ready: flat to `pending` at a
-- fresh sequence, a lane job to its lane's tail (the ring step). Then reads, in the same step, how
-- long until the next scheduled job is due — the consumer bounds its park with it.
-- A missing row is dropped; a row not in state scheduled goes dead naming the defect, as does a
-- key of another type at the row's key.
--
-- KEYS[1] emq:{q}:scheduled   (zset, score = due ms)
-- KEYS[2] emq:{q}:pending     (zset, score = sequence)
-- KEYS[3] emq:{q}:id          (string, INCR: sequences)
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
local moved = 0
if #due > 0 then
  local rows = {}
  for i, id in ipairs(due) do
    local jk = base .. 'job:' .. id
    -- by pcall: a key of another type there is buried below (false here), never raised
    local row = redis.pcall('HMGET', jk, 'state', 'group')
    if emq_foreign(row) then
      local defect, data = emq_foreign_read(base, id)
      row = { foreign = defect, data = data }
    else
      -- whether the payload is there, without copying it into Lua (it may be MiBs, times limit)
      row[3] = redis.call('HEXISTS', jk, 'data') == 1
    end
    rows[i] = row
  end
  emq_bulk('ZREM', scheduled, due)
  local flat, lanes, order = 0, {}, {}
  for i, id in ipairs(due) do
    local row = rows[i]
    local state, g = row[1], row[2]
    if row.foreign then
      emq_bury_foreign(base, id, now, row.foreign, row.data)
      emq_count(base, 'failed', 1)
    elseif state == 'scheduled' and row[3] then
      emq_ready(base, id, g)
      redis.call('HDEL', base .. 'job:' .. id, 'run_at')
      if g then
      if not lanes[g] then order[#order + 1] = g end
      lanes[g] = (lanes[g] or 0) + 1
    else
      flat = flat + 1
    end
      moved = moved + 1
    elseif state then
      emq_bury(base, id, now, 'malformed row: state ' .. state .. (row[3] and '' or ', no data') .. ' in scheduled')
      emq_count(base, 'failed', 1)
    end
  end
  local wakes = flat
  if flat > 0 then emq_ring_step_flat(base) end
  -- groups in the order their first job came (pairs() order is undefined; the twin must match)
  for _, g in ipairs(order) do
    local added = lanes[g]
    wakes = wakes + emq_claimable(base, g, added)
    emq_ring_step(base, g)
  end
  emq_wake(base, wakes)
end
local head = redis.call('ZRANGE', scheduled, '0', '0', 'WITHSCORES')
local next_ms = -1
if head[2] then
  next_ms = tonumber(head[2]) - now
  if next_ms < 0 then next_ms = 0 end
end
return {moved, next_ms}
