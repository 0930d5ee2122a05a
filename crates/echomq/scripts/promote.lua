-- promote — up to ARGV[2] due jobs (score <= now) from `scheduled` to ready: to `pending` or its
-- lane at a fresh rank of its priority (the ring step); and the due slots of at most 64 schedules
-- fired. It answers, in the same step, how long until the next scheduled job or schedule slot
-- after them is due — the consumer bounds its park with it.
-- A missing row is dropped; a row not in state scheduled goes dead naming the defect, as does a
-- key of another type at the row's key.
--
-- A due schedule (its entry in schedule_due at or before now) is decided here, in the step that
-- fires it, so each slot is decided once whatever the number of consumers, their crashes or a
-- replay of this script: its slots at or before now are decided and leave its list. A slot more
-- than the grace (the schedule's own, else ARGV[3]) before now is missed: `skip` fires none of
-- those, `once` the latest, `all:N` the latest N; a slot within the grace fires. Overlap `skip`
-- fires only the latest chosen slot, and none while the schedule's last job still waits or runs;
-- the others are counted skipped. A fired slot's job is `sched:<name>:<slot ms>`, made ready from
-- the template; a row already at that id (a caller's) is left as it is and the slot fires nothing.
-- A schedule left with fewer than 16 slots is named in the reply for a refill (the consumer
-- computes more: refill_schedule); one with no future slot decides nothing and waits a second for
-- its refill. No schedule fires while the queue is being obliterated.
-- Reads first (lib/keys.lua): the due ids, the next job due after them, the due schedules, their
-- state, templates and last jobs, the ids their slots take, the rows, the groups and the flat set
-- they join, then the writes.
--
-- KEYS[1] emq:{q}:scheduled    (zset, score = due ms)
-- KEYS[2] emq:{q}:pending      (zset, score = rank)
-- KEYS[3] emq:{q}:order        (hash: the ranking's clock and aging)
-- KEYS[4] emq:{q}:schedule_due (zset: schedule name -> its next slot, ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] limit (>= 1, the consumer's pump_batch)
-- ARGV[3] the grace in ms of the schedules without their own
--
-- Replies: {moved, ms until the next due job or slot or -1 when none, fired, then per schedule to
--          refill: name, version, timing, zone, misfire, grace ms, cursor, now}; error EMQARGS.
-- Wakes: one per job made claimable (at most 16).
local scheduled, sdue = KEYS[1], KEYS[4]
local base, limit, grace = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
if not limit or limit < 1 then return emq_bad_args('promote', 'limit') end
if not emq_whole(grace, 0) then return emq_bad_args('promote', 'grace') end
-- the idle path: nothing scheduled and no schedule, nothing to read the clock for
local shead = redis.call('ZRANGE', sdue, '0', '0', 'WITHSCORES')
local jhead = redis.call('ZRANGE', scheduled, '0', '0', 'WITHSCORES')
if not jhead[1] and not shead[1] then return {0, -1, 0} end
local now = emq_now()
-- nothing due (the common beat of a queue with delayed jobs or schedules): only when the next is
local jat, sat = tonumber(jhead[2]), tonumber(shead[2])
if (not jat or jat > now) and (not sat or sat > now) then
  local at = jat
  if not at or (sat and sat < at) then at = sat end
  return {0, at - now, 0}
end
-- the due jobs are the set's first #due members: once they leave, the next one due is the member
-- ranked right after them (none due: the head)
local due, next_at = {}, tonumber(jhead[2])
if next_at and next_at <= now then
  due = redis.call('ZRANGEBYSCORE', scheduled, '-inf', now, 'LIMIT', '0', limit)
  next_at = tonumber(redis.call('ZRANGE', scheduled, #due, #due, 'WITHSCORES')[2])
end
local function sooner(at)
  if at and (not next_at or at < next_at) then next_at = at end
end
-- the schedules: each due one planned (its updates, fires and refill request)
local plans, fired, refills = {}, {}, {}
if shead[2] and tonumber(shead[2]) > now then sooner(tonumber(shead[2])) end
if shead[2] and tonumber(shead[2]) <= now and redis.call('EXISTS', base .. 'obliterating') == 0 then
  local names = redis.call('ZRANGEBYSCORE', sdue, '-inf', now, 'LIMIT', '0', '64')
  sooner(tonumber(redis.call('ZRANGE', sdue, #names, #names, 'WITHSCORES')[2]))
  for _, name in ipairs(names) do
    local key = base .. 'schedule:' .. name
    local f = redis.call('HMGET', key, 'slots', 'backlog', 'misfire', 'overlap', 'grace', 'last_job',
      'version', 'timing', 'tz', 'cursor', 'paused', 'fired', 'missed', 'skipped')
    local p = { key = key, name = name }
    plans[#plans + 1] = p
    if not f[8] or f[11] == '1' then
      -- no such schedule (or paused): a stale entry, dropped
      p.drop = true
    else
      local g_ms = tonumber(f[5]) or grace
      local past, left = {}, {}
      for _, s in ipairs(emq_slots_parse(f[1])) do
        if s <= now then past[#past + 1] = s else left[#left + 1] = s end
      end
      if #left == 0 then
        -- no future slot: nothing decided until a refill brings one
        p.due = now + 1000
      else
        local late, chosen = {}, {}
        for _, s in ipairs(past) do
          if now - s > g_ms then late[#late + 1] = s end
        end
        local catch = 1
        if f[3] == 'skip' then catch = 0 end
        local all = f[3] and string.match(f[3], '^all:(%d+)$')
        if all then catch = tonumber(all) end
        for i = math.max(1, #late - catch + 1), #late do chosen[#chosen + 1] = late[i] end
        for i = #late + 1, #past do chosen[#chosen + 1] = past[i] end
        local skipped = 0
        if f[4] == 'skip' and #chosen > 0 then
          local st = f[6] and f[6] ~= '' and redis.call('HGET', base .. 'job:' .. f[6], 'state')
          if st == 'pending' or st == 'active' or st == 'scheduled' then
            skipped, chosen = #chosen, {}
          else
            skipped, chosen = #chosen - 1, { chosen[#chosen] }
          end
        end
        local t, n, last = nil, 0, nil
        for _, s in ipairs(chosen) do
          local id = string.format('sched:%s:%d', name, s)
          if redis.call('EXISTS', base .. 'job:' .. id) == 0 then
            t = t or emq_template_read(key)
            fired[#fired + 1] = { id = id, t = t }
            n, last = n + 1, id
          end
        end
        p.fields = { 'slots', table.concat(left, ','), 'backlog', 0,
          'fired', (tonumber(f[12]) or 0) + n,
          'missed', (tonumber(f[13]) or 0) + (tonumber(f[2]) or 0) + #late,
          'skipped', (tonumber(f[14]) or 0) + skipped }
        if past[1] then
          p.fields[#p.fields + 1] = 'last_slot'
          p.fields[#p.fields + 1] = string.format('%d', past[#past])
        end
        if last then
          p.fields[#p.fields + 1] = 'last_job'
          p.fields[#p.fields + 1] = last
          p.fields[#p.fields + 1] = 'last_fire'
          p.fields[#p.fields + 1] = now
        end
        p.due = left[1]
      end
      sooner(p.due)
      if #left < 16 then
        for _, v in ipairs({ name, f[7] or '0', f[8], f[9] or 'UTC', f[3] or 'once', g_ms, f[10] or '0', now }) do
          refills[#refills + 1] = v
        end
      end
    end
  end
end
local next_ms = -1
if next_at then
  next_ms = next_at - now
  if next_ms < 0 then next_ms = 0 end
end
if #due == 0 and #plans == 0 then return {0, next_ms, 0} end
-- rows by emq_row_read: a key of another type at a row's key is buried (its defect read here)
local rows, lanes, order, flat, buried, kinds = {}, {}, {}, nil, false, {}
local function joins(g, kind)
  if not g then
    if not flat then flat = emq_flat_read(base) end
    kinds[kind or ''] = true
  elseif not lanes[g] then
    -- groups in the order their first job came (pairs() order is undefined; the twin must match)
    order[#order + 1] = g
    emq_lane_read(lanes, base, g, true)
  end
end
for _, j in ipairs(fired) do joins(j.t.g, j.t.kind) end
for i, id in ipairs(due) do
  local jk = base .. 'job:' .. id
  local row = emq_row_read(base, id, 'state', 'group', 'waited', 'priority', 'kind')
  if row.foreign then
    buried = true
  else
    -- whether the payload is there, without copying it into Lua (it may be MiBs, times limit);
    -- the fields become {state, group, has data, waited, priority, kind}
    row[6] = row[5]
    row[5] = row[4]
    row[4] = row[3]
    row[3] = redis.call('HEXISTS', jk, 'data') == 1
    local state, g = row[1], row[2]
    if state == 'scheduled' and row[3] then
      joins(g or nil, row[6])
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
  emq_wake_touch(touch)
  for k in pairs(kinds) do emq_flat_touch(touch, flat, k) end
end
local ranks = nil
if flat or #order > 0 then ranks = emq_order_read(base, now, touch) end
if buried then
  touch[#touch + 1] = 'dead'
  touch[#touch + 1] = 'metrics:failed'
end
emq_touch(base, touch)

for _, p in ipairs(plans) do
  if p.drop then
    redis.call('ZREM', sdue, p.name)
  else
    if p.fields then redis.call('HSET', p.key, unpack(p.fields)) end
    redis.call('ZADD', sdue, p.due, p.name)
  end
end
if #due > 0 then emq_bulk('ZREM', scheduled, due) end
local moved, failed, added, w = 0, 0, {}, emq_wakes()
for _, j in ipairs(fired) do
  local g = j.t.g
  emq_fire(base, j.id, j.t, g and lanes[g] or flat, ranks)
  if g then added[g] = (added[g] or 0) + 1 else emq_wakes_add(w, j.t.kind, 1) end
end
for i, id in ipairs(due) do
  local row = rows[i]
  local state, g = row[1], row[2]
  if row.foreign then
    emq_bury_foreign(base, id, now, row.foreign, row.data)
    failed = failed + 1
  elseif state == 'scheduled' and row[3] then
    emq_ready(base, id, g, g and lanes[g] or flat, ranks, row[5], row[6])
    redis.call('HDEL', base .. 'job:' .. id, 'run_at')
    if g then added[g] = (added[g] or 0) + 1 else emq_wakes_add(w, row[6] or '', 1) end
    moved = moved + 1
  elseif state then
    emq_bury(base, id, now, emq_misplaced(state, 'scheduled', not row[3]))
    emq_notify(base, row[4], id)
    failed = failed + 1
  end
end
if ranks then emq_order_write(base, ranks) end
if flat then emq_flat_step(base, flat) end
for _, g in ipairs(order) do emq_wakes_add(w, nil, emq_lane_step(base, g, lanes[g], added[g])) end
emq_wakes_push(base, w, paused)
emq_count(base, 'failed', failed, now)
local reply = { moved, next_ms, #fired }
for _, v in ipairs(refills) do reply[#reply + 1] = v end
return reply
