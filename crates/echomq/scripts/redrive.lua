-- redrive — a dead job back to ready (pending or its lane at a fresh rank of its priority; the ring
-- step), attempts kept (they never go down), its budget raised: max_attempts = the attempts it
-- has used (attempts - free) + extra;
-- its stall count and any cancel mark of an earlier run cleared. One id, or the oldest dead jobs in
-- a chunk (the client loops).
--
-- KEYS[1] emq:{q}:dead        (zset, score = time of death)
-- KEYS[2] emq:{q}:pending     (zset)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] mode: 'one' or 'all'
-- ARGV[3] the id ('one') or the chunk size 1..1000 ('all')
-- ARGV[4] extra attempts (>= 1)
--
-- Replies: 'one': 1 = redriven, 0 = not dead, -1 = gone.
--          'all': {redriven, dead members looked at} (0 looked at = no dead job left).
-- Wakes: one per job made claimable (at most 16).
-- Reads first (lib/keys.lua): the dead ids, their rows, the groups and the flat set they join, then the
-- writes.
local base, mode, extra = ARGV[1], ARGV[2], tonumber(ARGV[4])
if not extra or extra < 1 then return emq_bad_args('redrive', 'extra') end
local ids
if mode == 'one' then
  ids = { ARGV[3] }
elseif mode == 'all' then
  local n = tonumber(ARGV[3])
  if not n or n < 1 or n > 1000 then return emq_bad_args('redrive', 'chunk') end
  ids = redis.call('ZRANGE', KEYS[1], 0, n - 1)
else
  return emq_bad_args('redrive', 'mode')
end
local rows, lanes, order, flat, kinds = {}, {}, {}, nil, {}
for i, id in ipairs(ids) do
  local row = redis.call('HMGET', base .. 'job:' .. id, 'state', 'attempts', 'group', 'free', 'priority', 'kind')
  if row[1] == 'dead' then
    local g = row[3]
    if not g then
      if not flat then flat = emq_flat_read(base) end
      kinds[row[6] or ''] = true
    elseif not lanes[g] then
      -- groups in the order their first job came (pairs() order is undefined; the twin must match)
      order[#order + 1] = g
      emq_lane_read(lanes, base, g, true)
    end
  end
  rows[i] = row
end
if mode == 'one' then
  if not rows[1][1] then return -1 end
  if rows[1][1] ~= 'dead' then return 0 end
end
local paused = emq_paused_read(base)
local touch = {}
-- 'all' read `dead` (ZRANGE); 'one' only writes it
if mode == 'one' then touch[1] = 'dead' end
if flat or #order > 0 then
  touch[#touch + 1] = 'ring'
  emq_wake_touch(touch)
  for k in pairs(kinds) do emq_flat_touch(touch, flat, k) end
end
local ranks = nil
if flat or #order > 0 then ranks = emq_order_read(base, emq_now(), touch) end
emq_touch(base, touch)

-- every member looked at leaves `dead`; those whose row says dead go ready
emq_bulk('ZREM', KEYS[1], ids)
local done, added, w = 0, {}, emq_wakes()
for i, id in ipairs(ids) do
  local state, att, g = rows[i][1], emq_used(rows[i][2], rows[i][4]), rows[i][3]
  if state == 'dead' then
    redis.call('HSET', base .. 'job:' .. id, 'max_attempts', att + extra)
    -- a cancel asked of an earlier run is spent: the operator asked for this one
    redis.call('HDEL', base .. 'job:' .. id, 'stalled', 'cancel')
    emq_ready(base, id, g, g and lanes[g] or flat, ranks, rows[i][5], rows[i][6])
    if g then added[g] = (added[g] or 0) + 1 else emq_wakes_add(w, rows[i][6] or '', 1) end
    done = done + 1
  end
end
if ranks then emq_order_write(base, ranks) end
if flat then emq_flat_step(base, flat) end
for _, g in ipairs(order) do emq_wakes_add(w, nil, emq_lane_step(base, g, lanes[g], added[g])) end
emq_wakes_push(base, w, paused)
if mode == 'one' then return 1 end
return {done, #ids}
