-- _lib.lua — helpers the loader prepends (each script gets those it uses) to every script except the self-contained extend_lock.lua
-- and sweep_stalled.lua (those two run as a raw EVAL of the file, as the seed documents).
-- Every key here is the queue base ARGV[1] = 'emq:{q}:' plus a suffix listed in keyspace.rs.
-- None of these raises on well-formed keys; callers read and validate before their first write.

-- the store's clock, in ms
local function emq_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- a whole count below 10^14 as text for a command argument (tostring turns larger ones into
-- exponents): Redis formats a number argument with a printf ("%.17g", about 2,200 instructions),
-- and the small counts of the hot paths (a slot count, a metric's increment, a range's index) need
-- none
local function emq_text(n)
  if n >= 0 and n <= 9 and n % 1 == 0 then return string.sub('0123456789', n + 1, n + 1) end
  return tostring(n)
end

-- the reserved member of `active` (keyspace.rs ACTIVE_PIN): scored +inf, so no lease deadline and
-- no recovery range ever reaches it, and over 64 bytes, so `active` is a skiplist from the first
-- claim on — a small sorted set kept as a listpack scans it whole on every insert and lookup, which
-- made claim + complete_many of 100 cost ~15 % more. Never a job id (ids are [A-Za-z0-9._:-]).
local function emq_active_pin()
  return '~ reserved: scored +inf, past every lease; over 64 bytes, so this sorted set stays a skiplist ~'
end

-- a group's (active count, limit): its own limit, else the queue default l:~, else 1
local function emq_slots(base, g)
  local f = redis.call('HMGET', base .. 'groups', 'a:' .. g, 'l:' .. g, 'l:~')
  return tonumber(f[1]) or 0, tonumber(f[2]) or tonumber(f[3]) or 1
end

-- the ring step for group g: when its r: flag is unset and it is eligible (a ready job and a free
-- slot), RPUSH it and set the flag. O(1), never scans the ring. Returns 1 when pushed.
local function emq_ring_step(base, g)
  local groups = base .. 'groups'
  if redis.call('HEXISTS', groups, 'r:' .. g) == 1 then return 0 end
  local active, limit = emq_slots(base, g)
  if active >= limit then return 0 end
  if redis.call('LLEN', base .. 'lane:' .. g) == 0 then return 0 end
  redis.call('RPUSH', base .. 'ring', g)
  redis.call('HSET', groups, 'r:' .. g, '1')
  return 1
end

-- the ring step for the flat set, member '~'
local function emq_ring_step_flat(base)
  local groups = base .. 'groups'
  if redis.call('HEXISTS', groups, 'r:~') == 1 then return 0 end
  if redis.call('ZCARD', base .. 'pending') == 0 then return 0 end
  redis.call('RPUSH', base .. 'ring', '~')
  redis.call('HSET', groups, 'r:~', '1')
  return 1
end

-- how many jobs the `added` ready jobs just pushed on g's lane made claimable: min(len, free)
-- after the push less min(len - added, free) before it (jobs behind a waiting one already filling
-- every free slot make nothing claimable). Call it after the push.
local function emq_claimable(base, g, added)
  local active, limit = emq_slots(base, g)
  local free = limit - active
  if free < 0 then free = 0 end
  local len = redis.call('LLEN', base .. 'lane:' .. g)
  local before = len - added
  if before < 0 then before = 0 end
  return math.min(len, free) - math.min(before, free)
end

-- whether n is a whole number from least up to 2^53 (nil, NaN and the infinities are not: NaN and
-- inf % 1 are NaN)
local function emq_whole(n, least)
  return n ~= nil and n >= least and n < 9007199254740992 and n % 1 == 0
end

-- one wake token per job made claimable, at most 16, then the list trimmed to its newest 16
local function emq_wake(base, n)
  -- a paused queue makes nothing claimable: resume pushes the wakes
  if n <= 0 or redis.call('EXISTS', base .. 'paused') == 1 then return end
  if n > 16 then n = 16 end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  if redis.call('RPUSH', base .. 'wake', unpack(tokens)) > 16 then
    redis.call('LTRIM', base .. 'wake', '-16', '-1')
  end
end

-- a lane job of g left `active`: the slot invariant (one slot of g freed, a:<g> deleted at 0), then
-- the ring step for g, both from one read of g's fields (its count, flag and limits). Returns 1
-- when it put g back on the ring (a job made claimable). A caller pushing the job back on g's lane
-- pushes it first.
local function emq_release(base, g)
  local groups = base .. 'groups'
  local f = redis.call('HMGET', groups, 'a:' .. g, 'r:' .. g, 'l:' .. g, 'l:~')
  local left = (tonumber(f[1]) or 0) - 1
  if left <= 0 then
    left = 0
    redis.call('HDEL', groups, 'a:' .. g)
  else
    redis.call('HSET', groups, 'a:' .. g, emq_text(left))
  end
  if f[2] or left >= (tonumber(f[3]) or tonumber(f[4]) or 1) then return 0 end
  if redis.call('LLEN', base .. 'lane:' .. g) == 0 then return 0 end
  redis.call('RPUSH', base .. 'ring', g)
  redis.call('HSET', groups, 'r:' .. g, '1')
  return 1
end

-- a lane job left `active`: its slot freed, the ring step, a wake when it put g back on the ring
local function emq_leave_lane(base, g)
  emq_wake(base, emq_release(base, g))
end

-- the fence of every holder verb (DESIGN §1): returns -1 (gone: no row) or 0 (stale: another
-- token, or none) when the caller does not hold the job; else nil and the row's group (nil for a
-- flat job). The caller then tests membership of `active` — the reply of the ZREM its settle needs
-- anyway — and answers stale on 0 (complete_many: the count of one ZREM for the batch, and the
-- row's state only when that count is neither all nor none). The fence reads no `state`: every
-- script that moves an id into or out of `active` writes the row's state in the same step, so an
-- id in `active` whose attempts equal the token is active, and a two-field HMGET costs the hot
-- settle path about 40 % less than three (callgrind: ~6,100 instructions against ~9,900: Redis 7.0
-- grows the reply's Lua table again at its third element). flat: the job is known to be flat
-- (emq_no_lanes): the token alone is read, one HGET with no reply table (about 4,000 instructions
-- per settle fewer in complete_many), and no group is returned.
local function emq_fence(jk, token, flat)
  local t, g
  if flat then
    t = redis.call('HGET', jk, 'attempts')
  else
    local r = redis.call('HMGET', jk, 'attempts', 'group')
    t, g = r[1], r[2] or nil
  end
  if t == token then return nil, g end
  if t or redis.call('EXISTS', jk) == 1 then return 0 end
  return -1
end

-- whether no lane job can be in `active`: the groups hash holds no field but the flat member's
-- (r:~, l:~). By the slot invariant every active lane job counts in its group's a:<g>, which is
-- deleted at 0; a group with no a:<g> either has no ready job or is on the ring (r:<g>).
local function emq_no_lanes(base)
  local groups = base .. 'groups'
  local fields = redis.call('HLEN', groups)
  if fields == 0 then return true end
  if fields > 2 then return false end
  local f = redis.call('HMGET', groups, 'r:~', 'l:~')
  local flat = 0
  if f[1] then flat = flat + 1 end
  if f[2] then flat = flat + 1 end
  return flat == fields
end

-- an optional value from ARGV: '' = none, else the value behind a one-byte '+' prefix
local function emq_opt(v)
  if v == '' then return nil end
  return string.sub(v, 2)
end

-- a finished job (completed / cancelled): retained (newest `keep` rows, trimmed) or deleted
local function emq_finish(base, id, state, now, keep, field, value)
  local jk = base .. 'job:' .. id
  if keep <= 0 then
    redis.call('DEL', jk)
    return
  end
  if value then
    redis.call('HSET', jk, 'state', state, 'finished_at', now, field, value)
  else
    redis.call('HSET', jk, 'state', state, 'finished_at', now)
  end
  local done = base .. 'completed'
  redis.call('ZADD', done, now, id)
  local over = redis.call('ZCARD', done) - keep
  if over > 0 then
    for _, old in ipairs(redis.call('ZRANGE', done, 0, over - 1)) do
      redis.call('DEL', base .. 'job:' .. old)
    end
    redis.call('ZREMRANGEBYRANK', done, 0, over - 1)
  end
end

-- a job to the morgue, scored with the store's time of death
local function emq_bury(base, id, now, err)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'dead', 'last_error', err)
  redis.call('ZADD', base .. 'dead', now, id)
end

-- a job key holding no hash (a key of another type there: only by hand) met by a verb that never
-- fails its batch or beat on a bad row (claim, reap, promote): the key becomes a dead row naming the
-- defect, a string's bytes kept as its data (nothing of another type can be kept in a row), and the
-- id goes to the morgue. Returns the defect. A lane job's group is unknown then: its slot stays.
local function emq_bury_foreign(base, id, now)
  local jk = base .. 'job:' .. id
  local kind = redis.call('TYPE', jk)['ok']
  local defect = 'malformed row: a ' .. kind .. ', not a hash'
  local data = nil
  if kind == 'string' then data = redis.call('GET', jk) end
  redis.call('DEL', jk)
  if data then redis.call('HSET', jk, 'data', data) end
  emq_bury(base, id, now, defect)
  return defect
end

-- whether a reply of redis.pcall reading a row is Redis's refusal of a key of another type (any
-- other error is raised again: a read raises nothing else)
local function emq_foreign(reply)
  local err = type(reply) == 'table' and reply['err']
  if not err then return false end
  if string.sub(err, 1, 9) == 'WRONGTYPE' then return true end
  error(reply)
end

-- a completion record, written by the settling script itself (opt-in: recmax > 0 = MAXLEN ~)
local function emq_record(base, recmax, id, status, attempts, field, value, now)
  if recmax <= 0 then return end
  if value then
    redis.call('XADD', base .. 'completions', 'MAXLEN', '~', recmax, '*',
      'id', id, 'status', status, 'attempts', attempts or '0', field, value, 'at', now)
  else
    redis.call('XADD', base .. 'completions', 'MAXLEN', '~', recmax, '*',
      'id', id, 'status', status, 'attempts', attempts or '0', 'at', now)
  end
end

-- a counter of emq:{q}:metrics:<event>
local function emq_count(base, event, n)
  if n > 0 then redis.call('HINCRBY', base .. 'metrics:' .. event, 'count', emq_text(n)) end
end

-- a job made ready again: the flat set at a fresh sequence, or its lane's tail; its state pending
local function emq_ready(base, id, g)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
  if g then
    redis.call('RPUSH', base .. 'lane:' .. g, id)
  else
    redis.call('ZADD', base .. 'pending', redis.call('INCR', base .. 'id'), id)
  end
end

-- ZADD/ZREM/RPUSH (on `key`) or DEL (key = nil) with many arguments, unpacked in chunks of at
-- most 1000 (an even size, so ZADD's score/member pairs never split)
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

-- `reclaimed` (set): every id in `active` whose attempts are not 1. Claim adds a job it hands out
-- again; every exit from `active` takes its id out. So an id in `active` and not in this set is on
-- its first attempt: complete_many settles a batch of first attempts without reading a row.
-- A job left `active` with its token: out of the set unless it held the first attempt (a member
-- left behind would only send complete_many to its per-entry fence)
local function emq_unmark(base, id, token)
  if token ~= '1' then redis.call('SREM', base .. 'reclaimed', id) end
end

-- a refusal of malformed arguments, before anything is written
local function emq_bad_args(verb, what)
  return redis.error_reply('EMQARGS ' .. verb .. ': ' .. what)
end

-- ready new jobs published: to the flat set (`ready` = score/member pairs) or g's lane (`ready` =
-- ids), then the ring step and one wake per job made claimable
local function emq_publish_ready(base, g, ready)
  if #ready == 0 then return end
  if g then
    emq_bulk('RPUSH', base .. 'lane:' .. g, ready)
    emq_ring_step(base, g)
    emq_wake(base, emq_claimable(base, g, #ready))
  else
    emq_bulk('ZADD', base .. 'pending', ready)
    -- the ring step for '~', pending being known non-empty: set the flag, push when it was unset
    if redis.call('HSETNX', base .. 'groups', 'r:~', '1') == 1 then
      redis.call('RPUSH', base .. 'ring', '~')
    end
    emq_wake(base, #ready / 2)
  end
end

-- the decimal texts of the n sequence values after seq, in order, built in one go — a number-to-text
-- printf once per ten values instead of once per value (each printf costs about a tenth of a bulk
-- enqueue's job), no function call per value — into `into`, each once, or twice in a row when
-- `copies` is 2 (the score/member pairs of a ZADD)
local function emq_seq_texts(seq, n, into, copies)
  local digits = { [0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9' }
  local tens, prefix, k = -1, '', 0
  for v = seq + 1, seq + n do
    local d = v % 10
    local t = (v - d) / 10
    if t ~= tens then
      tens = t
      if t == 0 then prefix = '' else prefix = tostring(t) end
    end
    local text = prefix .. digits[d]
    into[k + 1] = text
    if copies == 2 then into[k + 2] = text end
    k = k + copies
  end
  return into
end

-- new jobs for enqueue (g = nil) and genqueue: validate the whole batch, then write.
-- ARGV from index o: n, then either n payloads (the plain layout: generated ids, no delay, no
-- budget of their own — one argument per job instead of four, the bulk path) or per job: id
-- ('' = generated), delay_ms, max_attempts ('' = none), payload.
-- Returns {first sequence, index of each duplicate, …}: the new jobs take the sequences from the
-- first on, in batch order, and a generated id is its sequence. Or an error reply, nothing written.
local function emq_new_jobs(verb, base, o, g)
  local n = tonumber(ARGV[o])
  local plain = n and #ARGV == o + n
  if not n or n < 1 or n > 1000 or not (plain or #ARGV == o + 4 * n) then
    return emq_bad_args(verb, 'batch shape')
  end
  if redis.call('EXISTS', base .. 'obliterating') == 1 then
    return redis.error_reply('EMQOBLITERATING the queue is being obliterated')
  end
  if plain then
    local seq = redis.call('INCRBY', base .. 'id', n) - n
    -- one text per job, reused for key, score and member: a lane's ids, or the flat set's pairs
    local copies = g and 1 or 2
    local first, ready = seq + 1, emq_seq_texts(seq, n, {}, copies)
    local call, jobs = redis.call, base .. 'job:'
    for i = 1, n do
      local id = ready[copies * i]
      if g then
        call('HSET', jobs .. id, 'data', ARGV[o + i], 'state', 'pending', 'group', g)
      else
        -- exactly the two fields of a waiting flat row
        call('HSET', jobs .. id, 'data', ARGV[o + i], 'state', 'pending')
      end
    end
    emq_publish_ready(base, g, ready)
    return { first }
  end
  -- read and validate everything first
  local seen, dup, delays, fresh = {}, {}, {}, 0
  for i = 1, n do
    local a = o + 4 * (i - 1)
    local id, delay, maxa = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3]
    if not delay or delay < 0 or delay ~= math.floor(delay) then
      return emq_bad_args(verb, 'delay of job ' .. i)
    end
    if maxa ~= '' and not (tonumber(maxa) and tonumber(maxa) >= 1) then
      return emq_bad_args(verb, 'max_attempts of job ' .. i)
    end
    if id ~= '' then
      if seen[id] or redis.call('EXISTS', base .. 'job:' .. id) == 1 then
        dup[i] = true
      else
        seen[id] = true
      end
    end
    if not dup[i] then fresh = fresh + 1 end
    delays[i] = delay
  end
  -- then write: every new job takes one sequence value; a generated id is its sequence
  local reply, ready, sched = {}, {}, {}
  local now = 0
  local seq = 0
  if fresh > 0 then seq = redis.call('INCRBY', base .. 'id', fresh) - fresh end
  reply[1] = seq + 1
  local texts, k = emq_seq_texts(seq, fresh, {}, 1), 0
  for i = 1, n do
    if dup[i] then
      reply[#reply + 1] = i
    else
      k = k + 1
      local seqtext = texts[k]
      local a = o + 4 * (i - 1)
      local id, delay, maxa = ARGV[a + 1], delays[i], ARGV[a + 3]
      if id == '' then id = seqtext end
      if delay == 0 and not g and maxa == '' then
        -- the common case, kept to exactly the two fields of a waiting flat row
        redis.call('HSET', base .. 'job:' .. id, 'data', ARGV[a + 4], 'state', 'pending')
      else
        local row = { 'data', ARGV[a + 4], 'state', 'pending' }
        if g then row[#row + 1] = 'group'; row[#row + 1] = g end
        if maxa ~= '' then row[#row + 1] = 'max_attempts'; row[#row + 1] = maxa end
        if delay > 0 then
          if now == 0 then now = emq_now() end
          row[4] = 'scheduled'
          row[#row + 1] = 'run_at'; row[#row + 1] = now + delay
        end
        redis.call('HSET', base .. 'job:' .. id, unpack(row))
      end
      if delay > 0 then
        sched[#sched + 1] = now + delay
        sched[#sched + 1] = id
      elseif g then
        ready[#ready + 1] = id
      else
        ready[#ready + 1] = seqtext
        ready[#ready + 1] = id
      end
    end
  end
  if #sched > 0 then emq_bulk('ZADD', base .. 'scheduled', sched) end
  emq_publish_ready(base, g, ready)
  return reply
end

-- up to `budget` job rows of a sorted set deleted with their memberships (drain, obliterate).
-- `leave(id)` runs per row before it goes (forced obliterate frees lane slots). Returns how many.
local function emq_purge_zset(base, key, budget, leave)
  if budget <= 0 then return 0 end
  local ids = redis.call('ZRANGE', key, 0, budget - 1)
  if #ids == 0 then return 0 end
  local rows = {}
  for i, id in ipairs(ids) do
    if leave then leave(id) end
    rows[i] = base .. 'job:' .. id
  end
  emq_bulk('DEL', nil, rows)
  emq_bulk('ZREM', key, ids)
  return #ids
end

-- up to `budget` lane jobs deleted, walking the groups hash from `cursor` (the groups with a
-- non-empty lane are exactly those with an a: or r: field). Returns (removed, next cursor,
-- finished): finished when HSCAN came back to 0 and every lane it showed was emptied.
local function emq_purge_lanes(base, budget, cursor)
  local removed = 0
  local scan = redis.call('HSCAN', base .. 'groups', cursor, 'COUNT', 100)
  local fields = scan[2]
  for i = 1, #fields, 2 do
    local kind, g = string.sub(fields[i], 1, 2), string.sub(fields[i], 3)
    if (kind == 'a:' or kind == 'r:') and g ~= '~' then
      local lane = base .. 'lane:' .. g
      if budget - removed <= 0 then return removed, cursor, false end
      local ids = redis.call('LRANGE', lane, 0, budget - removed - 1)
      for _, id in ipairs(ids) do redis.call('DEL', base .. 'job:' .. id) end
      redis.call('LTRIM', lane, #ids, -1)
      removed = removed + #ids
      if redis.call('LLEN', lane) > 0 then return removed, cursor, false end
    end
  end
  return removed, scan[1], scan[1] == '0'
end

-- a waiting job (pending or scheduled) taken out of wherever it waits; false when the row says it
-- waits but it is not there. Lane membership costs an LREM (operator verbs only).
local function emq_unwait(base, id, state, g)
  if state == 'scheduled' then
    return redis.call('ZREM', base .. 'scheduled', id) == 1
  elseif g then
    return redis.call('LREM', base .. 'lane:' .. g, 1, id) == 1
  end
  return redis.call('ZREM', base .. 'pending', id) == 1
end
