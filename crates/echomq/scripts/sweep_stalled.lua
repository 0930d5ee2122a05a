-- sweep_stalled — the count-thresholded stalled sweep, a self-contained file: a raw EVAL of it runs
-- with the KEYS, ARGV and reply below.
-- Every active member whose lease lapsed (score <= now, server clock), at most ARGV[3]: its `stalled`
-- count +1; at or above ARGV[2] it goes dead (last_error "stalled", metrics failed), else back to
-- ready (metrics stalled): pending or its lane at rank 0, the front (recovered jobs ordered by id
-- among themselves). A lane job frees its group's slot (the ring step; a wake per recovered
-- job, and one when a dead-lettered lane job put its group back on the ring); a missing row is
-- dropped from active and reported neither way; a key of another type at a row's key (only by
-- hand) becomes a dead row naming the defect (a string's bytes kept as its data; its group, so its
-- slot, unknown), reported dead, metrics failed; the morgue is scored with the server's time of
-- death; a job a caller waits on (its row's `waited` mark) that goes dead has its id published on
-- emq:{q}:finished.
-- Reads first: Redis keeps the writes of a script that fails half-way, and a key a Cluster is
-- migrating can be refused at any call, so the sweep reads the lapsed ids, every row, each group's
-- fields and lane, the flat set's ring flag and whether the queue is paused, and reaches the keys
-- it only writes with one EXISTS, before its first write.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:pending     (zset, score = rank; recovered jobs 0)
-- KEYS[3] emq:{q}:dead        (zset, score = time of death ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] max_stalled (>= 1; 1 = dead at the first stall)
-- ARGV[3] limit (>= 1)
--
-- Replies: {recovered ids, dead ids}; error EMQARGS.
--
-- Generated from scripts/src/sweep_stalled.lua and the library (scripts/lib/): edit those, then
-- run EMQ_REGENERATE=1 cargo test -p echomq --lib scripts

-- the clock as one script call reads it: TIME once at most, so that every step of a call (a
-- settle and the claim behind it) sees one instant
local emq_clock = {}

-- the store's time in µs (the clock of the rate limits)
local function emq_now_us()
  if not emq_clock[1] then
    local t = redis.call('TIME')
    emq_clock[1] = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return emq_clock[1]
end

-- the store's clock, in ms: emq_now_us's whole ms
local function emq_now()
  return math.floor(emq_now_us() / 1000)
end
-- reaches keys the script writes without reading them (suffixes of the queue base), before its
-- first write: EXISTS of at most 1000 keys at a time, refused whole when any of them is not served
-- here
local function emq_touch(base, suffixes)
  for i = 1, #suffixes, 1000 do
    local keys = {}
    for j = i, math.min(i + 999, #suffixes) do keys[#keys + 1] = base .. suffixes[j] end
    redis.call('EXISTS', unpack(keys))
  end
end

-- ZADD/ZREM/RPUSH/HSET/HDEL (on `key`) or DEL/EXISTS (key = nil) with many arguments, unpacked in
-- chunks of at most 1000 (an even size, so pairs never split)
local function emq_bulk(cmd, key, args)
  for i = 1, #args, 1000 do
    local j = i + 999
    if j > #args then j = #args end
    if key then
      redis.call(cmd, key, unpack(args, i, j))
    else
      redis.call(cmd, unpack(args, i, j))
    end
  end
end

-- whether the queue is paused: a paused queue makes nothing claimable, so its scripts push no wake
-- (resume pushes them)
local function emq_paused_read(base)
  return redis.call('EXISTS', base .. 'paused') == 1
end

-- the wake lists a script pushing tokens for flat jobs of `kind` reaches before its first write,
-- added to a list of suffixes for emq_touch (`wake` and `wake_any` go in every such list)
local function emq_wake_touch(touch, kind)
  touch[#touch + 1] = 'wake'
  touch[#touch + 1] = 'wake_any'
  if kind then touch[#touch + 1] = 'wake:' .. kind end
  return touch
end

-- n tokens (at most 16) pushed onto the list `key`, then the list trimmed to its newest 16
local function emq_push_tokens(key, n)
  if n <= 0 then return end
  if n > 16 then n = 16 end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  if redis.call('RPUSH', key, unpack(tokens)) > 16 then
    redis.call('LTRIM', key, '-16', '-1')
  end
end

-- the wakes a script gathers, pushed once (emq_wakes_push): `any` counts the jobs of a kind it
-- does not know, kinds[k] the flat jobs of kind k ('' for raw jobs), in the order first met
local function emq_wakes()
  return { any = 0, kinds = {}, order = {} }
end

-- n jobs made claimable, of `kind` (nil: a kind the script does not know)
local function emq_wakes_add(w, kind, n)
  if n <= 0 then return end
  if kind == nil then
    w.any = w.any + n
    return
  end
  if not w.kinds[kind] then
    w.kinds[kind] = 0
    w.order[#w.order + 1] = kind
  end
  w.kinds[kind] = w.kinds[kind] + n
end

-- the gathered wakes pushed: each kind's onto wake:<kind>, the unknown onto wake_any, all of them
-- onto wake; none while paused (`paused` as emq_paused_read read it before the first write, the
-- lists reached then: emq_wake_touch)
local function emq_wakes_push(base, w, paused)
  if paused then return end
  local total = w.any
  emq_push_tokens(base .. 'wake_any', w.any)
  for _, k in ipairs(w.order) do
    emq_push_tokens(base .. 'wake:' .. k, w.kinds[k])
    total = total + w.kinds[k]
  end
  emq_push_tokens(base .. 'wake', total)
end

-- the length of g's lane (a sorted set ranked as `pending` is: emq_rank). A lane an earlier
-- version wrote as a list (FIFO, no priorities) is turned into that sorted set here, its order
-- kept: its jobs ranked 1, 2, … — after recovered jobs (0) and before every job ranked since
-- (emq_rank's ranks are far larger). The conversion is the one write a script may make before its
-- reads end: it leaves the same jobs waiting in the same order, so a script refused after it
-- still leaves a sound queue, and later calls find the lane converted.
local function emq_lane_len(base, g)
  local lane = base .. 'lane:' .. g
  local n = redis.pcall('ZCARD', lane)
  if type(n) == 'number' then return n end
  if string.sub(n['err'], 1, 9) ~= 'WRONGTYPE' then error(n) end
  local ids = redis.call('LRANGE', lane, 0, -1)
  local ranked = {}
  for i, id in ipairs(ids) do
    ranked[2 * i - 1] = i
    ranked[2 * i] = id
  end
  redis.call('DEL', lane)
  emq_bulk('ZADD', lane, ranked)
  return #ids
end

-- the count of the jobs waiting in the queue's lanes (the field lane_jobs of the groups hash, so
-- that counts reads them in O(1) where summing the lanes is O(groups)) for a script that moves
-- jobs into or out of lanes, read before its first write: `field` is the field as the script read
-- it. A queue keeps the count from its first lane job on; for one that keeps none yet (written by
-- an earlier version, or never given a lane job) the lanes are summed here over the groups hash
-- (the groups with a non-empty lane are those with an a: or r: field), by reads alone.
-- Returns {n = the count before the script's writes, kept = whether the queue keeps it}.
local function emq_lane_jobs_of(base, field)
  if field then return { n = tonumber(field) or 0, kept = true } end
  local total, seen, cursor = 0, {}, '0'
  repeat
    local scan = redis.call('HSCAN', base .. 'groups', cursor, 'COUNT', 1000)
    cursor = scan[1]
    for i = 1, #scan[2], 2 do
      local kind, g = string.sub(scan[2][i], 1, 2), string.sub(scan[2][i], 3)
      if (kind == 'a:' or kind == 'r:') and g ~= '~' and not seen[g] then
        seen[g] = true
        total = total + emq_lane_len(base, g)
      end
    end
  until cursor == '0'
  return { n = total, kept = false }
end

-- emq_lane_jobs_of for a script that moves jobs into lanes, of the groups it read (`lanes`, by
-- emq_lane_read): summed at most once per script, the first group read with it sharing it
local function emq_lane_jobs_for(lanes, base, field)
  for _, o in pairs(lanes) do
    if o.lj then return o.lj end
  end
  return emq_lane_jobs_of(base, field)
end

-- `n` jobs joined (n > 0) or left (n < 0) the lanes (lj: emq_lane_jobs_of's): the count moved,
-- written first from lj's sum when the queue kept none (HSETNX: of several such writes in one
-- script, each from the same sum taken before the writes, the first starts the count). No lj (a
-- group read without `adding`) moves nothing: never a count started from nothing.
local function emq_lane_jobs_add(base, lj, n)
  if n == 0 or not lj then return end
  if not lj.kept then
    redis.call('HSETNX', base .. 'groups', 'lane_jobs', lj.n)
    lj.kept = true
  end
  redis.call('HINCRBY', base .. 'groups', 'lane_jobs', n)
end

-- what a lane job of g leaving `active`, or ready jobs joining g's lane, need of g, read once per
-- script before its first write (lanes[g] keeps it, and the writes keep it up to date): its active
-- count a:<g>, whether it is on the ring (r:<g>), its limit (its own, else the queue default l:~,
-- else 1) and its lane's length; for a script `adding` jobs to lanes, the count of every lane's
-- jobs too (lj: emq_lane_jobs_for), which a script that only takes lane jobs out of `active`
-- never needs
local function emq_lane_read(lanes, base, g, adding)
  local s = lanes[g]
  if not s then
    local f = redis.call('HMGET', base .. 'groups', 'a:' .. g, 'r:' .. g, 'l:' .. g, 'l:~', 'lane_jobs')
    s = {
      a = tonumber(f[1]) or 0,
      ringed = f[2] and true or false,
      limit = tonumber(f[3]) or tonumber(f[4]) or 1,
      len = emq_lane_len(base, g),
      field = f[5],
    }
    lanes[g] = s
  end
  if adding and not s.lj then s.lj = emq_lane_jobs_for(lanes, base, s.field) end
  return s
end

-- whether group g (s: its state from emq_lane_read) belongs back on the ring: off it, with a ready
-- job and a free slot
local function emq_lane_eligible(s)
  return not (s.ringed or s.a >= s.limit or s.len == 0)
end

-- the ring step for g (s from emq_lane_read): g pushed at the ring's tail and its r: flag set when
-- eligible. O(1), never scans the ring. Returns 1 when pushed.
local function emq_lane_ring(base, g, s)
  if not emq_lane_eligible(s) then return 0 end
  redis.call('RPUSH', base .. 'ring', g)
  redis.call('HSET', base .. 'groups', 'r:' .. g, '1')
  s.ringed = true
  return 1
end

-- a lane job of g left `active` (s: g's state from emq_lane_read): the slot invariant (a:<g> less
-- one, deleted at 0), then the ring step for g. Returns 1 when it put g back on the ring: a job
-- made claimable. A caller that puts the job back on g's lane does so first (emq_lane_front).
local function emq_lane_leave(base, g, s)
  s.a = s.a - 1
  if s.a <= 0 then
    s.a = 0
    redis.call('HDEL', base .. 'groups', 'a:' .. g)
  else
    redis.call('HSET', base .. 'groups', 'a:' .. g, s.a)
  end
  return emq_lane_ring(base, g, s)
end

-- a job back at the front of g's lane (s: g's state from emq_lane_read), its row pending
local function emq_lane_front(base, g, s, id)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
  redis.call('ZADD', base .. 'lane:' .. g, 0, id)
  s.len = s.len + 1
  emq_lane_jobs_add(base, s.lj, 1)
end

-- Flat jobs by kind. A flat ready job waits in `pending` and in its kind's set pending:<kind>
-- (`pending:` for a raw job, the empty kind) at the same rank; the set `kinds` names each kind
-- whose set may hold jobs. A consumer of every kind claims from `pending`, one of some kinds from
-- their sets, so no claim reads a job it cannot run. The groups hash's field `by_kind` marks a
-- queue whose sets by kind hold every flat job (lib/migrations.lua fills them for a queue an
-- earlier version wrote). emq_flat_add and emq_flat_ready write the two, the claim and
-- emq_unwait take jobs out of both.

-- what a script making flat jobs of `kind` ready reads before its first write (s from
-- emq_flat_read): whether the kind's set holds jobs (so that only a kind new to it is added to
-- `kinds`; the EXISTS reaches the set), and the suffixes it only writes, added to `touch`
local function emq_flat_touch(touch, s, kind)
  if s.known[kind] == nil then s.known[kind] = redis.call('EXISTS', s.base .. 'pending:' .. kind) == 1 end
  touch[#touch + 1] = 'kinds'
  return emq_wake_touch(touch, kind)
end

-- what the flat set's ring step needs, read before the first write: whether '~' is on the ring,
-- how many jobs pending holds and whether its sets by kind hold every one (`by_kind`)
local function emq_flat_read(base)
  local f = redis.call('HMGET', base .. 'groups', 'r:~', 'by_kind')
  return {
    base = base,
    ringed = f[1] and true or false,
    kept = f[2] and true or false,
    len = redis.call('ZCARD', base .. 'pending'),
    known = {},
  }
end

-- flat jobs of `kind` ('' for raw jobs) ready: `ranked` rank/id pairs into pending and the kind's
-- set (s from emq_flat_read counts them; a kind emq_flat_touch did not find there joins `kinds`).
-- A pending found empty is whole by kind from here on.
local function emq_flat_add(base, s, kind, ranked)
  if s.len == 0 and not s.kept then
    redis.call('HSET', base .. 'groups', 'by_kind', '1')
    s.kept = true
  end
  emq_bulk('ZADD', base .. 'pending', ranked)
  emq_bulk('ZADD', base .. 'pending:' .. kind, ranked)
  if not s.known[kind] then
    redis.call('SADD', base .. 'kinds', kind)
    s.known[kind] = true
  end
  s.len = s.len + #ranked / 2
end

-- a flat job of `kind` (nil for a raw job) back in pending at `score` (0 = the front, where
-- recovered jobs go), its row pending (s from emq_flat_read; emq_flat_step follows)
local function emq_flat_ready(base, s, id, score, kind)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
  emq_flat_add(base, s, kind or '', { score, id })
end

-- the flat set's ring step (s from emq_flat_read): '~' pushed at the ring's tail when off it and
-- pending holds a job
local function emq_flat_step(base, s)
  if s.ringed or s.len == 0 then return end
  redis.call('RPUSH', base .. 'ring', '~')
  redis.call('HSET', base .. 'groups', 'r:~', '1')
  s.ringed = true
end

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
-- a job a caller waits on (its row's `waited` mark, set by mark_waited) has finished — completed,
-- cancelled or dead: its id published on emq:{q}:finished. Only a marked row costs this command.
local function emq_notify(base, waited, id)
  if waited then redis.call('PUBLISH', base .. 'finished', id) end
end

-- a counter of emq:{q}:metrics:<event>; for `completed` and `failed` also this minute's count,
-- the field m<minute> (minute = now ms / 60000) of the same hash, one command per call however
-- many jobs it counts: the first count of a minute also deletes the field of a day before, so
-- the hash keeps about a day of minutes (the history verb reads them)
local function emq_count(base, event, n, now)
  if n <= 0 then return end
  local key = base .. 'metrics:' .. event
  redis.call('HINCRBY', key, 'count', n)
  if event == 'completed' or event == 'failed' then
    local minute = math.floor(now / 60000)
    if redis.call('HINCRBY', key, 'm' .. minute, n) == n then
      redis.call('HDEL', key, 'm' .. (minute - 1440))
    end
  end
end

local active = KEYS[1]
local base = ARGV[1]
local maxst, lim = tonumber(ARGV[2]), tonumber(ARGV[3])
if not maxst or maxst < 1 or not lim or lim < 1 then
  return redis.error_reply('EMQARGS sweep_stalled: max_stalled and limit must be >= 1')
end
local now = emq_now()
local exp = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, lim)

-- The reads. rows[i]: {state, group, stalled, waited, kind} (state nil: a missing row, dropped), or for
-- a key of another type {foreign = its defect, data = a string's bytes} (emq_row_read); lanes[g]
-- (emq_lane_read) and flat (emq_flat_read, read when a flat job may recover), kept up to date by
-- the writes below.
local rows, lanes, flat, kinds = {}, {}, nil, {}
local dies, recovers, laned = false, false, false
for i, id in ipairs(exp) do
  local row = emq_row_read(base, id, 'state', 'group', 'stalled', 'waited', 'kind')
  if row.foreign then
    dies = true
  elseif row[1] then
    local g = row[2]
    if (tonumber(row[3]) or 0) + 1 >= maxst then dies = true else recovers = true end
    if g then
      emq_lane_read(lanes, base, g, true)
      laned = true
    else
      if not flat then flat = emq_flat_read(base) end
      kinds[row[5] or ''] = true
    end
  end
  rows[i] = row
end
local paused = emq_paused_read(base)
-- the keys only written below
local touch = {}
if dies then
  touch[#touch + 1] = 'dead'
  touch[#touch + 1] = 'metrics:failed'
end
if recovers then
  touch[#touch + 1] = 'pending'
  touch[#touch + 1] = 'metrics:stalled'
  for k in pairs(kinds) do emq_flat_touch(touch, flat, k) end
end
if recovers or laned then
  touch[#touch + 1] = 'ring'
  emq_wake_touch(touch)
end
emq_touch(base, touch)

-- The writes, walked backwards; the reply lists are put back in lapse order below
local recovered, buried = {}, {}
local flat_back, w = false, emq_wakes()
for i = #exp, 1, -1 do
  local id = exp[i]
  redis.call('ZREM', active, id)
  local row = rows[i]
  if row.foreign then
    emq_bury_foreign(base, id, now, row.foreign, row.data)
    buried[#buried + 1] = id
  elseif row[1] then
    local g = row[2]
    local stalls = (tonumber(row[3]) or 0) + 1
    redis.call('HSET', base .. 'job:' .. id, 'stalled', stalls)
    if stalls >= maxst then
      emq_bury(base, id, now, 'stalled')
      buried[#buried + 1] = id
      emq_notify(base, row[4], id)
      -- the slot invariant, and the ring step: the freed slot may make the lane's next job claimable
      if g then emq_wakes_add(w, nil, emq_lane_leave(base, g, lanes[g])) end
    else
      if g then
        emq_lane_front(base, g, lanes[g], id)
        emq_lane_leave(base, g, lanes[g])
        emq_wakes_add(w, nil, 1)
      else
        emq_flat_ready(base, flat, id, 0, row[5])
        emq_wakes_add(w, row[5] or '', 1)
        flat_back = true
      end
      recovered[#recovered + 1] = id
    end
  end
end
if flat_back then emq_flat_step(base, flat) end
emq_count(base, 'failed', #buried, now)
emq_count(base, 'stalled', #recovered, now)
emq_wakes_push(base, w, paused)
local function reversed(list)
  local out = {}
  for i = #list, 1, -1 do out[#out + 1] = list[i] end
  return out
end
return {reversed(recovered), reversed(buried)}
