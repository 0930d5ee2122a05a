-- lib/rows.lua — Rows that are not handed out: a key of another type at a row's key (read by pcall,
-- its defect named; only by hand) and the morgue (dead rows, scored by the store's time of death).

-- whether a reply of redis.pcall reading a row (a table: the row's fields, or an error's `err`) is
-- Redis's refusal of a key of another type (any other error is raised again: nothing is written
-- before a row is read)
local function emq_foreign(reply)
  local err = reply.err
  if not err then return false end
  if string.sub(err, 1, 9) == 'WRONGTYPE' then return true end
  error(reply)
end

-- a job key holding no hash (a key of another type: only by hand), met by a verb that never fails
-- its batch or beat on a bad row: the defect naming its type, and a string's bytes (kept as the
-- dead row's data; nothing of another type fits in a row)
local function emq_foreign_read(base, id)
  local jk = base .. 'job:' .. id
  local kind = redis.call('TYPE', jk)['ok']
  local data = nil
  if kind == 'string' then data = redis.call('GET', jk) end
  return 'malformed row: a ' .. kind .. ', not a hash', data
end

-- the defect of a row met in a set its state does not belong to (`where`: the set, as the defect
-- names it; `no_data`: the row has no data either)
local function emq_misplaced(state, where, no_data)
  return 'malformed row: state ' .. tostring(state) .. (no_data and ', no data' or '') .. ' in ' .. where
end

-- a job to the morgue, scored with the store's time of death
local function emq_bury(base, id, now, err)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'dead', 'last_error', err)
  redis.call('ZADD', base .. 'dead', now, id)
end

-- a row's fields `...` (HMGET by pcall, before the first write), or, for a key of another type at
-- the row's key, {foreign = its defect, data = a string's bytes} (emq_foreign_read), which a verb
-- that never fails its batch on a bad row buries (emq_bury_foreign); any other error is raised
local function emq_row_read(base, id, ...)
  local row = redis.pcall('HMGET', base .. 'job:' .. id, ...)
  if emq_foreign(row) then
    local defect, data = emq_foreign_read(base, id)
    return { foreign = defect, data = data }
  end
  return row
end

-- such a key (emq_foreign_read) becomes a dead row naming the defect, and the id goes to the
-- morgue. A lane job's group is unknown then: its slot stays.
local function emq_bury_foreign(base, id, now, defect, data)
  local jk = base .. 'job:' .. id
  redis.call('DEL', jk)
  if data then redis.call('HSET', jk, 'data', data) end
  emq_bury(base, id, now, defect)
end
