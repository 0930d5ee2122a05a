-- lib/settle.lua — The settles that finish held jobs (complete, complete_many, complete_cancelled):
-- fenced entries, then every held job finished under the retention, its slot freed, the event
-- counted.

-- the settles that finish held jobs (complete, complete_many, complete_cancelled): n entries, entry
-- i the three values of `args` from first + 3(i - 1) on — id, token, value as sent ('' = none, else
-- '+' and the bytes) — each fenced on its own, a repeated entry stale after its first settle; then
-- every held job leaves `active` finished as `state` ('completed' or 'cancelled') under the queue's
-- retention (emq_finish: its row deleted, or kept with its value — the output, or the cancel reason
-- as last_error), its lane's slot freed with the ring step, the event counted and recorded, a
-- waited job's id published. Reads first: the rows (a held row's state 'active' is its membership
-- of `active`: every verb that moves an id into or out of `active` writes the row's state in the
-- same step), their groups, the retention, then the writes. Returns a code per entry: 1 settled, 0
-- stale, -1 gone.
local function emq_settle_finished(base, active, args, first, n, state, recmax)
  local field, record_field = 'output', 'output'
  if state == 'cancelled' then field, record_field = 'last_error', 'error' end
  local reply, firsts, lanes, jobs = {}, {}, {}, base .. 'job:'
  -- the held entries, `done` of them: their first argument, row key and fence reply (attempts,
  -- group, state, waited, and the count of free claims only when a record needs it)
  local held, rows, fenced, done = {}, {}, {}, 0
  for i = 1, n do
    local a = first + 3 * (i - 1)
    local id = args[a]
    if firsts[id] then
      reply[i] = 0
    else
      local jk = jobs .. id
      local refused, g, r
      if recmax > 0 then
        refused, g, r = emq_fence(jk, args[a + 1], 'state', 'waited', 'free')
      else
        refused, g, r = emq_fence(jk, args[a + 1], 'state', 'waited')
      end
      if refused then
        reply[i] = refused
      else
        firsts[id] = true
        if r[3] == 'active' then
          reply[i] = 1
          done = done + 1
          held[done], rows[done], fenced[done] = a, jk, r
          if g then emq_lane_read(lanes, base, g) end
        else
          reply[i] = 0
        end
      end
    end
  end
  if done == 0 then return reply end
  local paused = false
  local touch = { 'active', 'metrics:' .. state }
  if next(lanes) then
    paused = emq_paused_read(base)
    touch[#touch + 1] = 'ring'
    emq_wake_touch(touch)
  end
  if recmax > 0 then touch[#touch + 1] = 'completions' end
  emq_touch(base, touch)
  local ret = emq_retention_read(base, state, done)
  local now = ret.now or 0
  -- the clock for the record, and for a completion's minute in the history
  if (recmax > 0 or state == 'completed') and now == 0 then now = emq_now() end
  local gone = {}
  for k = 1, done do gone[k] = args[held[k]] end
  emq_bulk('ZREM', active, gone)
  emq_expire(base, ret)
  if ret.keep <= 0 then emq_bulk('DEL', nil, rows) end
  local wakes = 0
  for k = 1, done do
    local a, r = held[k], fenced[k]
    local id, value = args[a], nil
    if ret.keep > 0 or recmax > 0 then value = emq_opt(args[a + 2]) end
    if ret.keep > 0 then emq_finish(base, id, state, now, ret, field, value) end
    if recmax > 0 then emq_record(base, recmax, id, state, emq_used(r[1], r[5]), record_field, value, now) end
    emq_notify(base, r[4], id)
    if r[2] then wakes = wakes + emq_lane_leave(base, r[2], lanes[r[2]]) end
  end
  emq_wake(base, wakes, paused)
  emq_count(base, state, done, now)
  return reply
end
