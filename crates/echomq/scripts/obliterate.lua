-- obliterate — deletes every key of the queue, at most ARGV[3] job rows per call: the client loops
-- while the reply says more is left, then `SREM emq:queues q` (and `SADD`s it again when the
-- queue's `registered` exists by then: an enqueue landed after the last call and began the queue's
-- next life, whose SADD the SREM may have undone). The last call deletes `registered` with the
-- rest, so the next life's first enqueue owes its registration again. The first call marks
-- the queue (`obliterating`) so enqueues and claims are refused meanwhile. Active jobs refuse it
-- unless forced (then their lane slots are freed as they go, keeping the slot invariant).
-- Reads first (lib/keys.lua): the held jobs' rows and groups, the heads of the other sets, then (budget
-- left) a page of the groups hash and the heads of its lanes, every row they hold and every key the
-- last call deletes (EXISTS; the schedules' among them), then the writes. Every call tells the
-- queue's waiters to look at their jobs again (`*` on emq:{q}:finished): it reads no row, so it
-- sees no waited mark.
--
-- KEYS[1] emq:{q}:active      (zset)
-- KEYS[2] emq:{q}:obliterating (string, the mark)
-- KEYS[3] emq:{q}:pending     (zset)
-- KEYS[4] emq:{q}:scheduled   (zset)
-- KEYS[5] emq:{q}:dead        (zset)
-- KEYS[6] emq:{q}:completed   (zset)
-- KEYS[7] emq:{q}:groups      (hash)
-- KEYS[8] emq:{q}:cancelled   (zset)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] force (1/0)
-- ARGV[3] limit: rows deleted per call (1..1000)
-- ARGV[4] the HSCAN cursor over the groups hash ('0' on the first call)
--
-- Replies: {removed, next cursor, finished (1/0)}; {-1, active count, 0} when refused (nothing
--          written); error EMQARGS.
local active = KEYS[1]
local base, force, limit, cursor = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4]
if not limit or limit < 1 or limit > 1000 then return emq_bad_args('obliterate', 'limit') end
-- held jobs: every member of active
local running = redis.call('ZCARD', active)
if running > 0 and not force then return {-1, running, 0} end

-- a forced lane job leaves active: its slot freed, then the ring step (no wake), because the lanes
-- are found by their a:/r: fields: a group whose last slot this frees while jobs wait in its lane
-- (it was at its limit, off the ring) would otherwise keep no field, and its lane and rows would
-- outlive the queue
local held = emq_zset_head_read(active, limit)
local lanes, leaving = {}, {}
for i, id in ipairs(held) do
  local g = redis.call('HGET', base .. 'job:' .. id, 'group')
  if g then
    emq_lane_read(lanes, base, g)
    leaving[i] = g
  end
end
-- the groups hash as the lanes walk meets it once those leaves are written: the a: field of a
-- group whose last slot they free is gone, and the r: field of a group they put back on the ring
-- comes last (where HSET adds a field), so the walk finds that group's lane in this call. Planned
-- on copies of the lanes' state: the writes below run the same steps on the state itself.
local gone, pushed, plan = {}, {}, {}
for g, s in pairs(lanes) do plan[g] = { a = s.a, ringed = s.ringed, limit = s.limit, len = s.len } end
for i = 1, #held do
  local g = leaving[i]
  if g then
    local s = plan[g]
    s.a = s.a - 1
    if s.a <= 0 then
      s.a = 0
      gone['a:' .. g] = true
    end
    if emq_lane_eligible(s) then
      s.ringed = true
      pushed[#pushed + 1] = 'r:' .. g
    end
  end
end
local removed = #held
local sets, rows = {}, {}
for _, k in ipairs({ 3, 4, 5, 6, 8 }) do
  local ids = emq_zset_head_read(KEYS[k], limit - removed)
  sets[#sets + 1] = { key = KEYS[k], ids = ids }
  removed = removed + #ids
  emq_rows_of(ids, rows)
end
local chunked = removed >= limit
local cuts, next_cursor, finished = {}, cursor, false
if not chunked then
  local fields, scanned = emq_groups_page_read(base, cursor)
  local page = {}
  for _, f in ipairs(fields) do
    if not gone[f] then page[#page + 1] = f end
  end
  for _, f in ipairs(pushed) do page[#page + 1] = f end
  local n, walked
  cuts, n, walked = emq_lanes_read(base, limit - removed, page)
  removed = removed + n
  if walked then next_cursor, finished = scanned, scanned == '0' end
  for _, c in ipairs(cuts) do emq_rows_of(c.ids, rows) end
end
-- the keys only written: the mark, the rows (those of held jobs were read), the ring (a leave's
-- ring step), and on the last call every other key of the queue
local touch = rows
touch[#touch + 1] = 'obliterating'
if #pushed > 0 then touch[#touch + 1] = 'ring' end
local keys = {}
if finished then
  keys = { 'id', 'ring', 'groups', 'retention', 'wake', 'wake_any', 'paused', 'completions', 'registered',
           'order', 'throttled', 'tats', 'tat', 'schedules', 'schedule_due', 'dedup', 'dedup_sweep',
           'pending_tally', 'pending_since', 'starts', 'start_logs', 'kinds', 'kind_rates', 'kind_tats' }
  for _, event in ipairs({ 'completed', 'cancelled', 'failed', 'retried', 'stalled', 'reaped' }) do
    keys[#keys + 1] = 'metrics:' .. event
  end
  for _, name in ipairs(redis.call('ZRANGE', base .. 'schedules', 0, -1)) do
    keys[#keys + 1] = 'schedule:' .. name
  end
  for _, name in ipairs(redis.call('SMEMBERS', base .. 'start_logs')) do
    keys[#keys + 1] = 'starts:' .. name
  end
  for _, kind in ipairs(redis.call('HKEYS', base .. 'kind_rates')) do
    keys[#keys + 1] = 'kind_starts:' .. kind
  end
  for _, kind in ipairs(redis.call('SMEMBERS', base .. 'kinds')) do
    keys[#keys + 1] = 'pending:' .. kind
    keys[#keys + 1] = 'wake:' .. kind
  end
  for _, k in ipairs(keys) do touch[#touch + 1] = k end
end
emq_touch(base, touch)

redis.call('SET', KEYS[2], 1)
-- it reads no row, so no waited mark: every waiter of the queue looks at its job again ('*')
redis.call('PUBLISH', base .. 'finished', '*')
for i = 1, #held do
  local g = leaving[i]
  if g then emq_lane_leave(base, g, lanes[g]) end
end
emq_zset_purge(base, active, held)
for _, z in ipairs(sets) do emq_zset_purge(base, z.key, z.ids) end
if chunked then return {removed, cursor, 0} end
emq_lanes_cut(base, cuts)
if not finished then return {removed, next_cursor, 0} end
for i, k in ipairs(keys) do keys[i] = base .. k end
emq_bulk('DEL', nil, keys)
redis.call('DEL', KEYS[2])
return {removed, '0', 1}
