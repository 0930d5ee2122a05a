-- lib/schedules.lua — Schedules: their slots (a text of ascending Unix ms), and the jobs they fire
-- from their template.

-- the slots of a schedule (its field `slots`: Unix ms, comma-separated, ascending) as numbers
local function emq_slots_parse(text)
  local out = {}
  if text then
    for s in string.gmatch(text, '[^,]+') do out[#out + 1] = tonumber(s) end
  end
  return out
end

-- a schedule's new slots, given by the client (upsert, resume: ARGV from index `o`, ascending, as
-- Rust computed them), written with its new `version`: those after its last decided slot and not
-- before `now` are kept, so an edit never decides a slot twice and never fires one late that the
-- client saw as future (the client starts a little before its own clock, so a client clock ahead
-- of the store's loses no slot). An upsert carries (`carry`: the old `slots` text and `backlog`)
-- the old slots already due but not yet decided, and the count of missed slots not yet recorded:
-- a change made while a slot is due, or re-adding a schedule after an outage, still fires or
-- counts them by the misfire policy; a resume carries nothing (a paused schedule misses nothing).
-- The cursor (where a refill starts) is the last given. The due entry is the first slot kept (none
-- kept: now, so the next beat asks for a refill); a paused schedule has none.
local function emq_schedule_slots_write(base, key, name, o, last_slot, now, paused, version, carry)
  local keep, cursor, backlog = {}, now, 0
  if carry then
    for _, s in ipairs(emq_slots_parse(carry.slots)) do
      if s > (last_slot or -1) and s < now then keep[#keep + 1] = string.format('%d', s) end
    end
    backlog = tonumber(carry.backlog) or 0
  end
  for i = o, #ARGV do
    local s = tonumber(ARGV[i])
    if s > (last_slot or -1) and s >= now then keep[#keep + 1] = ARGV[i] end
    cursor = ARGV[i]
  end
  redis.call('HSET', key, 'slots', table.concat(keep, ','), 'cursor', cursor, 'backlog', backlog, 'version', version)
  if paused then
    redis.call('ZREM', base .. 'schedule_due', name)
  else
    redis.call('ZADD', base .. 'schedule_due', keep[1] or now, name)
  end
end

-- a schedule's job template (the fields upsert_schedule wrote) as a fired job's row fields (all but
-- its state, which emq_ready writes), with its group, priority and kind ('' for raw jobs); read
-- before the first write
local function emq_template_read(key)
  local f = redis.call('HMGET', key, 'data', 'group', 'priority', 'max_attempts', 'retry', 'kind')
  local row = { 'data', f[1] or '' }
  local g, p = nil, 0
  if f[2] and f[2] ~= '' then g = f[2]; row[#row + 1] = 'group'; row[#row + 1] = g end
  if f[3] and f[3] ~= '' then p = tonumber(f[3]) or 0; row[#row + 1] = 'priority'; row[#row + 1] = f[3] end
  if f[4] and f[4] ~= '' then row[#row + 1] = 'max_attempts'; row[#row + 1] = f[4] end
  if f[5] and f[5] ~= '' then row[#row + 1] = 'retry'; row[#row + 1] = f[5] end
  local kind = ''
  if f[6] and f[6] ~= '' then kind = f[6]; row[#row + 1] = 'kind'; row[#row + 1] = kind end
  return { row = row, g = g, p = p, kind = kind }
end

-- a fired job (a schedule's slot, or a trigger) written ready from its template (t from
-- emq_template_read): its row, then its place in the flat set or its group's lane (s from
-- emq_flat_read or emq_lane_read; o from emq_order_read), as emq_ready makes a job ready
local function emq_fire(base, id, t, s, o)
  redis.call('HSET', base .. 'job:' .. id, unpack(t.row))
  emq_ready(base, id, t.g, s, o, t.p, t.kind)
end
