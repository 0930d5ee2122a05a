-- lib/new_jobs.lua — New jobs (enqueue, genqueue): the batch validated whole before its first
-- write, ids from the queue's counter, ready jobs published to their set with the ring step, the
-- queue's registration.

-- ready new jobs published: to the flat set (under their kinds: kinds[i] the kind of the i-th
-- pair, '' for a raw job; nil = all raw) or g's lane (`ready` = rank/id pairs, emq_rank's), then
-- the ring step and one wake per job made claimable. s: the flat set's or g's state
-- (emq_flat_read, emq_lane_read), `paused` and the ranking `o` (its clock written back), read
-- before the first write.
local function emq_publish_ready(base, g, s, ready, paused, o, kinds)
  if #ready == 0 then return end
  local added = #ready / 2
  emq_order_write(base, o)
  if g then
    emq_bulk('ZADD', base .. 'lane:' .. g, ready)
    emq_lane_jobs_add(base, s.lj, added)
    s.len = s.len + added
    emq_wake(base, emq_lane_step(base, g, s, added), paused)
    return
  end
  local w = emq_wakes()
  if not kinds then
    emq_flat_add(base, s, '', ready)
    emq_wakes_add(w, '', added)
  else
    -- each kind's pairs in batch order
    local by = {}
    for i = 1, added do
      local k = kinds[i]
      local pairs_of = by[k]
      if not pairs_of then
        pairs_of = {}
        by[k] = pairs_of
        w.order[#w.order + 1] = k
        w.kinds[k] = 0
      end
      pairs_of[#pairs_of + 1] = ready[2 * i - 1]
      pairs_of[#pairs_of + 1] = ready[2 * i]
      w.kinds[k] = w.kinds[k] + 1
    end
    for _, k in ipairs(w.order) do emq_flat_add(base, s, k, by[k]) end
  end
  emq_flat_step(base, s)
  emq_wakes_push(base, w, paused)
end

-- the decimal texts of the n sequence values after seq, in order — the prefix of each run of ten
-- formatted once (docs/performance.md: the bulk enqueue's id texts)
local function emq_seq_texts(seq, n)
  local digits = { [0] = '0', '1', '2', '3', '4', '5', '6', '7', '8', '9' }
  local tens, prefix, into = -1, '', {}
  for v = seq + 1, seq + n do
    local d = v % 10
    local t = (v - d) / 10
    if t ~= tens then
      tens = t
      if t == 0 then prefix = '' else prefix = tostring(t) end
    end
    into[#into + 1] = prefix .. digits[d]
  end
  return into
end

-- what publishing `nready` ready new jobs needs (emq_publish_ready), read before the first write:
-- the state of the set they join (g's lane, else the flat set), whether the queue is paused and
-- how it ranks them (emq_order_read); `touch` gains the keys only written (for flat jobs, those of
-- each of `kinds`, a list of the kinds they may have: nil for raw jobs alone)
local function emq_publish_read(base, g, nready, touch, kinds)
  if nready == 0 then return nil, false, nil end
  touch[#touch + 1] = 'ring'
  emq_wake_touch(touch)
  local s
  if g then
    s = emq_lane_read({}, base, g, true)
  else
    s = emq_flat_read(base)
    for _, k in ipairs(kinds or { '' }) do emq_flat_touch(touch, s, k) end
  end
  return s, emq_paused_read(base), emq_order_read(base, emq_now(), touch)
end

-- the queue's registration in emq:queues (`registered`: one member, the token of the queue's life,
-- score 0 while the client's SADD is owed, 1 once paid), read before the first write. Returns the
-- token while the SADD is owed (false once paid: the reply's nil), and whether the queue's life
-- begins with this enqueue: then the token is new, the store's time to the microsecond (no two
-- lives of a queue begin in one microsecond: an obliterate runs between them, so a stale client's
-- ZADD XX of an earlier life's token marks nothing paid in this one).
local function emq_registration_read(base)
  local r = redis.call('ZRANGE', base .. 'registered', 0, 0, 'WITHSCORES')
  if r[1] == nil then
    local t = redis.call('TIME')
    return t[1] .. '.' .. string.format('%06d', tonumber(t[2])), true
  end
  if tonumber(r[2]) == 0 then return r[1], false end
  return false, false
end

-- a new life's registration written, owed (emq_registration_read's token and flag), as the last
-- write of an enqueue that landed: an enqueue refused or failed before it leaves none
local function emq_registration_write(base, owed, fresh_life)
  if fresh_life then redis.call('ZADD', base .. 'registered', 0, owed) end
end

-- new jobs for enqueue (g = nil) and genqueue: validate the whole batch, then write.
-- ARGV from index o: n, then either n payloads (the plain layout: generated ids, no delay, no
-- budget, priority, retry policy or dedup key of their own — one argument per job instead of
-- eight, the bulk path) or per job: id ('' = generated), delay_ms, max_attempts ('' = none), kind
-- ('' = none), priority ('' = 0, else 1..9), retry policy ('' = none), dedup ('' = none, else
-- `u:<key>` until finished, `f<ms>:<key>` for a window, `d<ms>:<key>` debounce), payload.
-- Returns {first sequence, registration owed, then per job answered by another: its index and
-- that job's id}: a caller id that exists answers with '' (the caller's own id), a dedup key held
-- with the holder's id, a debounce that gave the waiting holder its payload with the holder's id
-- and the index negated. The new jobs take the sequences from the first on, in batch order, and a
-- generated id is its sequence; the registration owed is the token of the queue's life while its
-- name's SADD to emq:queues is owed (the client then SADDs it and marks the token paid: ZADD XX
-- 1), else nil. Or an error reply, nothing written (the registration neither: a refused enqueue
-- never makes the client SADD).
-- A dedup key is held in the hash `dedup` (key -> `<holder id>`, or `<holder id>|<until ms>` for
-- a window), looked at when an enqueue of it arrives: `u` is held while the holder waits or runs
-- (its state pending, scheduled or active), `f` until its window ends, `d` while the holder still
-- waits (pending or scheduled): the holder takes the new payload and starts a window from now
-- (scheduled again, out of its ready set if it was ready) (a debounce
-- job waits its window, or its delay if longer, before it starts). A key not held is taken by the
-- enqueue's new job; a key met twice in a batch is held by its first job (a debounce: which
-- takes the later payload). An enqueue that takes a key also sweeps up to 20 + twice as many due
-- keys as it takes (emq_dedup_sweep_read), and puts each key it takes in `dedup_sweep`.
-- A ready job joins the flat set (or g's lane) at a rank of its priority (emq_rank); a row holds
-- `priority` and `retry` only when they are set.
-- Reads first: the mark, the registration, the caller ids (duplicates), the dedup keys and their
-- holders' states, the sweep's due keys and theirs, the id counter, the ready set's state and
-- ranking, then the rows of generated ids and the keys only written (emq_touch), then the writes.
-- The sequences come from the counter as read (GET); its INCRBY is the first write, so a counter
-- that holds no integer fails it with nothing written. The registration is the last write.
local function emq_new_jobs(verb, base, o, g)
  -- a job's arguments are ARGV[a + ID] .. ARGV[a + PAYLOAD], a job's first at a = o + JOB * (i - 1)
  -- (the names of ENQUEUE_JOB_FIELDS in store/verbs/enqueue.rs, in its order: a test holds them so)
  local ID, DELAY_MS, MAX_ATTEMPTS, KIND, PRIORITY, RETRY, DEDUP, PAYLOAD = 1, 2, 3, 4, 5, 6, 7, 8
  local JOB = PAYLOAD
  local n = tonumber(ARGV[o])
  local plain = n and #ARGV == o + n
  if not n or n < 1 or n > 1000 or not (plain or #ARGV == o + JOB * n) then
    return emq_bad_args(verb, 'batch shape')
  end
  if redis.call('EXISTS', base .. 'obliterating') == 1 then
    return redis.error_reply('EMQOBLITERATING the queue is being obliterated')
  end
  local owed, fresh_life = emq_registration_read(base)
  if plain then
    local seq = tonumber(redis.call('GET', base .. 'id')) or 0
    local ids = emq_seq_texts(seq, n)
    local rows = {}
    for i = 1, n do rows[i] = 'job:' .. ids[i] end
    local s, paused, order = emq_publish_read(base, g, n, rows)
    emq_touch(base, rows)
    redis.call('INCRBY', base .. 'id', n)
    local call, jobs, ready = redis.call, base .. 'job:', {}
    for i = 1, n do
      local id = ids[i]
      if g then
        call('HSET', jobs .. id, 'data', ARGV[o + i], 'state', 'pending', 'group', g)
      else
        -- exactly the two fields of a waiting flat row
        call('HSET', jobs .. id, 'data', ARGV[o + i], 'state', 'pending')
      end
      ready[2 * i - 1] = emq_rank(order, 0)
      ready[2 * i] = id
    end
    emq_publish_ready(base, g, s, ready, paused, order)
    emq_registration_write(base, owed, fresh_life)
    return { seq + 1, owed }
  end
  -- read and validate everything first
  local seen, dup, delays, fresh, nready, nsched = {}, {}, {}, 0, 0, 0
  -- dedup: the holder answering a job (an id, or the index of an earlier job of the batch),
  -- whether it debounces, the keys taken (ntakes of them), the payload a batch's first job takes,
  -- the clock
  local held, bounce, takes, first_of, payload_at, unwait, now = {}, {}, {}, {}, {}, {}, 0
  local ntakes = 0
  for i = 1, n do
    local a = o + JOB * (i - 1)
    local id, delay, maxa = ARGV[a + ID], tonumber(ARGV[a + DELAY_MS]), ARGV[a + MAX_ATTEMPTS]
    local prio, dd = ARGV[a + PRIORITY], ARGV[a + DEDUP]
    if not delay or delay < 0 or delay ~= math.floor(delay) then
      return emq_bad_args(verb, 'delay of job ' .. i)
    end
    if maxa ~= '' and not (tonumber(maxa) and tonumber(maxa) >= 1) then
      return emq_bad_args(verb, 'max_attempts of job ' .. i)
    end
    if prio ~= '' and not (emq_whole(tonumber(prio), 1) and tonumber(prio) <= 9) then
      return emq_bad_args(verb, 'priority of job ' .. i)
    end
    if id ~= '' then
      if seen[id] or redis.call('EXISTS', base .. 'job:' .. id) == 1 then
        dup[i] = true
      else
        seen[id] = true
      end
    end
    if dd ~= '' and not dup[i] then
      local mode, ttl, key = string.match(dd, '^([ufd])(%d*):(.+)$')
      ttl = tonumber(ttl)
      if not mode or (mode ~= 'u' and not emq_whole(ttl, 1)) then
        return emq_bad_args(verb, 'dedup of job ' .. i)
      end
      if mode == 'd' and ttl > delay then delay = ttl end
      if first_of[key] then
        held[i] = first_of[key]
        if mode == 'd' then bounce[i] = true; payload_at[first_of[key]] = a + PAYLOAD end
      else
        local h = redis.call('HGET', base .. 'dedup', key)
        local holder, till = nil, nil
        if h then holder, till = string.match(h, '^([^|]+)|?(%d*)$') end
        if holder and mode == 'f' then
          if now == 0 then now = emq_now() end
          if (tonumber(till) or 0) > now then held[i] = holder end
        elseif holder then
          local row = redis.call('HMGET', base .. 'job:' .. holder, 'state', 'group')
          local st = row[1]
          if mode == 'u' and (st == 'pending' or st == 'scheduled' or st == 'active') then held[i] = holder end
          if mode == 'd' and (st == 'pending' or st == 'scheduled') then
            held[i] = holder
            bounce[i] = true
            -- a ready holder goes back to waiting its window: out of its set first
            if st == 'pending' then unwait[i] = emq_waits_in_read(base, st, row[2], holder) end
          end
        end
        if not held[i] then
          takes[i] = { key = key, mode = mode, ttl = ttl }
          ntakes = ntakes + 1
          first_of[key] = i
        end
      end
      if held[i] then dup[i] = true end
    end
    if not dup[i] then
      fresh = fresh + 1
      if delay > 0 then nsched = nsched + 1 else nready = nready + 1 end
    end
    delays[i] = delay
  end
  local sweep = nil
  if ntakes > 0 then
    if now == 0 then now = emq_now() end
    sweep = emq_dedup_sweep_read(base, now, 20 + 2 * ntakes, first_of)
  end
  -- every new job takes one sequence value; a generated id is its sequence (its row reached here,
  -- a caller id's by the EXISTS above)
  local seq = 0
  if fresh > 0 then seq = tonumber(redis.call('GET', base .. 'id')) or 0 end
  local texts, touch, k = emq_seq_texts(seq, fresh), {}, 0
  for i = 1, n do
    if not dup[i] then
      k = k + 1
      if ARGV[o + JOB * (i - 1) + ID] == '' then touch[#touch + 1] = 'job:' .. texts[k] end
    end
  end
  local bounced = false
  for i = 1, n do
    if bounce[i] and type(held[i]) == 'string' then bounced = true end
  end
  -- the head of `scheduled`, which a job scheduled ahead of it replaces (emq_due_wake)
  local due_head, due_paused = nil, true
  if nsched > 0 or bounced then
    touch[#touch + 1] = 'scheduled'
    emq_wake_touch(touch)
    due_head, due_paused = emq_due_read(base), emq_paused_read(base)
  end
  for _, u in pairs(unwait) do touch[#touch + 1] = u.key end
  if sweep then
    touch[#touch + 1] = 'dedup'
    touch[#touch + 1] = 'dedup_sweep'
  end
  -- the kinds the ready jobs may have ('' for a raw job), each once
  local kinds, kind_seen = {}, {}
  for i = 1, n do
    local kind = ARGV[o + JOB * (i - 1) + KIND]
    if not kind_seen[kind] then
      kind_seen[kind] = true
      kinds[#kinds + 1] = kind
    end
  end
  local s, paused, order = emq_publish_read(base, g, nready, touch, kinds)
  emq_touch(base, touch)
  -- then write
  local reply, ready, sched, ids, ready_kinds = { seq + 1, owed }, {}, {}, {}, {}
  -- the keys taken: each with its holder in `dedup`, and its first look in `dedup_sweep`
  local holders, looks = {}, {}
  if fresh > 0 then redis.call('INCRBY', base .. 'id', fresh) end
  k = 0
  for i = 1, n do
    local a = o + JOB * (i - 1)
    if dup[i] then
      local h = held[i]
      if type(h) == 'number' then h = ids[h] end
      if h == nil then
        reply[#reply + 1] = i
        reply[#reply + 1] = ''
      elseif bounce[i] then
        reply[#reply + 1] = -i
        reply[#reply + 1] = h
        -- a holder already in the store (one of this batch is written with the payload below)
        if type(held[i]) == 'string' then
          if now == 0 then now = emq_now() end
          if unwait[i] then emq_unwait(base, h, unwait[i]) end
          redis.call('HSET', base .. 'job:' .. h, 'data', ARGV[a + PAYLOAD], 'state', 'scheduled', 'run_at', now + delays[i])
          sched[#sched + 1] = now + delays[i]
          sched[#sched + 1] = h
        end
      else
        reply[#reply + 1] = i
        reply[#reply + 1] = h
      end
    else
      k = k + 1
      local id, delay, maxa, kind = ARGV[a + ID], delays[i], ARGV[a + MAX_ATTEMPTS], ARGV[a + KIND]
      local prio, retry = ARGV[a + PRIORITY], ARGV[a + RETRY]
      local data = ARGV[payload_at[i] or (a + PAYLOAD)]
      if id == '' then id = texts[k] end
      ids[i] = id
      if delay == 0 and not g and maxa == '' and kind == '' and prio == '' and retry == '' then
        -- the common case, kept to exactly the two fields of a waiting flat row
        redis.call('HSET', base .. 'job:' .. id, 'data', data, 'state', 'pending')
      else
        local row = { 'data', data, 'state', 'pending' }
        if g then row[#row + 1] = 'group'; row[#row + 1] = g end
        if maxa ~= '' then row[#row + 1] = 'max_attempts'; row[#row + 1] = maxa end
        if kind ~= '' then row[#row + 1] = 'kind'; row[#row + 1] = kind end
        if prio ~= '' then row[#row + 1] = 'priority'; row[#row + 1] = prio end
        if retry ~= '' then row[#row + 1] = 'retry'; row[#row + 1] = retry end
        if delay > 0 then
          if now == 0 then now = emq_now() end
          row[4] = 'scheduled'
          row[#row + 1] = 'run_at'; row[#row + 1] = now + delay
        end
        redis.call('HSET', base .. 'job:' .. id, unpack(row))
      end
      local t = takes[i]
      if t then
        -- due for the sweep when its window ends, or a minute on (level 0)
        local v, look = id, now + 60000
        if t.mode == 'f' then
          look = now + t.ttl
          v = id .. '|' .. look
        end
        holders[#holders + 1] = t.key
        holders[#holders + 1] = v
        looks[#looks + 1] = look * 32
        looks[#looks + 1] = t.key
      end
      if delay > 0 then
        sched[#sched + 1] = now + delay
        sched[#sched + 1] = id
      else
        ready[#ready + 1] = emq_rank(order, tonumber(prio) or 0)
        ready[#ready + 1] = id
        ready_kinds[#ready_kinds + 1] = kind
      end
    end
  end
  if sweep then
    emq_bulk('HSET', base .. 'dedup', holders)
    emq_bulk('ZADD', base .. 'dedup_sweep', looks)
    emq_dedup_sweep_write(base, sweep)
  end
  if #sched > 0 then
    emq_bulk('ZADD', base .. 'scheduled', sched)
    local first = sched[1]
    for i = 3, #sched, 2 do
      if sched[i] < first then first = sched[i] end
    end
    emq_due_wake(base, due_head, first, due_paused)
  end
  emq_publish_ready(base, g, s, ready, paused, order, ready_kinds)
  emq_registration_write(base, owed, fresh_life)
  return reply
end
