-- redrive — a dead job back to ready (flat: pending at a fresh sequence; lane: its tail and the ring
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
local rows = {}
for i, id in ipairs(ids) do
  rows[i] = redis.call('HMGET', base .. 'job:' .. id, 'state', 'attempts', 'group', 'free')
end
if mode == 'one' then
  if not rows[1][1] then return -1 end
  if rows[1][1] ~= 'dead' then return 0 end
end
local done, flat, lanes, order = 0, 0, {}, {}
for i, id in ipairs(ids) do
  local state, att, g = rows[i][1], emq_used(rows[i][2], rows[i][4]), rows[i][3]
  redis.call('ZREM', KEYS[1], id)
  if state == 'dead' then
    redis.call('HSET', base .. 'job:' .. id, 'max_attempts', att + extra)
    -- a cancel asked of an earlier run is spent: the operator asked for this one
    redis.call('HDEL', base .. 'job:' .. id, 'stalled', 'cancel')
    emq_ready(base, id, g)
    if g then
      if not lanes[g] then order[#order + 1] = g end
      lanes[g] = (lanes[g] or 0) + 1
    else
      flat = flat + 1
    end
    done = done + 1
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
if mode == 'one' then return 1 end
return {done, #ids}
