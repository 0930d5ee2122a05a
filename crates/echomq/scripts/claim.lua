-- claim — up to n jobs off the ring, each leased until now + lease on the store's clock.
-- The ring is walked round-robin: pop the head member; if it is eligible take one job from it — the
-- flat set '~' its lowest rank, a group g its lane's lowest while a:<g> is below g's limit (its own
-- l:<g>, else the queue default l:~, else 1) — and push it back at the tail while still eligible,
-- else clear its r: flag. When '~' is the last member, the rest of the batch comes from pending at
-- once. A paused (or obliterating) queue claims nothing.
-- Kinds (ARGV[7] on): a consumer of some kinds takes flat jobs from their sets by kind (lib/ring.lua;
-- the lowest rank among their heads first, so FIFO and priorities hold across its kinds) and never
-- reads a row of another kind there; a lane whose head job is of another kind is passed over
-- untouched — its order and its group's slots as they were — and one wake token goes to that
-- kind's consumers (wake:<kind>: the lane's own token went to wake_any, which any pool may have
-- taken). The head's kind is read from its row once per head: the groups hash keeps it
-- (hk:<g> = '<id> <kind>') until a claim takes that job. A member holding only other kinds' jobs
-- stays on the ring for their consumers, moved to its tail, and is not walked again in this claim.
-- A queue whose flat sets by kind are not yet whole is filled first (emq_kinds_fill).
-- A kind's own limit (kind_rates: kind -> limit; its TAT in kind_tats, an exact one's log in
-- kind_starts:<kind>) gates the starts of that kind's jobs: while it admits none, the kind's flat
-- set is left out of the walk (so a claim of every kind walks the sets by kind too once any kind
-- has a limit) and a lane headed by such a job is passed over; the queue's other kinds go on.
-- Rate limits (GCRA on the store's clock, emq_rate_read in lib/rate.lua; an exact limit's log of
-- its last starts: `starts`, a group's `starts:<g>`, named in the set `start_logs`): the queue's
-- own (rate) gates every start — the walk stops while it admits none, leaving the ring as it is; a
-- group's (its own rate:<g>, else the default rate:~) gates its lane: a group it no longer admits
-- leaves the ring for `throttled`, scored by its next admission, its r: flag kept (so no enqueue
-- or settle puts it back),
-- and each claim first takes the groups due again from the head of `throttled` onto the walk's tail
-- (no scan of the groups still waiting). A group's TAT is its score in `tats` (members past are
-- removed), the queue's the string `tat`.
-- A job taken is handed out — state active, attempts + 1: its new fencing token — unless its row
-- says otherwise: at its budget (attempts - free >= its max_attempts, else ARGV[4]) it goes dead,
-- "lease expired on the last attempt" (a job that kills its worker would otherwise loop for ever);
-- a row carrying a cancel request goes to cancelled; a malformed row (no data, a state other than
-- pending, a count that is no whole number) or a key of another type goes dead naming its defect; a
-- missing row is dropped. None of these fails the batch; a waited job among them has its id
-- published. Every job taken out of its set leaves the pending tally (lib/rank.lua), in one write per
-- second of rank the batch spans.
-- Reads first (lib/keys.lua): the walk is planned from reads alone — the ring, each member's fields,
-- the heads of pending and of the lanes, every row it takes — then written in one go, so a refused
-- key or any error ends the script with nothing written.
--
-- KEYS[1] emq:{q}:ring        (list of ring members)
-- KEYS[2] emq:{q}:groups      (hash: a:<g> l:<g> r:<g> l:~ r:~)
-- KEYS[3] emq:{q}:pending     (zset, score = rank)
-- KEYS[4] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[5] emq:{q}:paused      (string)
-- KEYS[6] emq:{q}:obliterating (string)
-- KEYS[7] emq:{q}:throttled   (zset, score = next admission µs)
-- KEYS[8] emq:{q}:tats        (zset, score = a group's TAT µs)
-- KEYS[9] emq:{q}:tat         (string, the queue's TAT µs)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] n, 1..1000
-- ARGV[3] lease ms (> 0)
-- ARGV[4] default max_attempts (>= 1)
-- ARGV[5] record MAXLEN (0 = no completion records)
-- ARGV[6] max bytes: no job is taken once the payloads handed out reach this (>= 1; the first
--         job is always taken, so a reply passes it by one payload at most)
-- ARGV[7] k, the count of kinds the consumer runs (0 or absent: every kind), then ARGV[8 ..
--         7 + k] the kinds ('' for raw jobs)
-- ARGV[8 + k] slots: how many of the n jobs the consumer starts at once (absent: n); it holds the
--         rest until a slot frees (prefetch). A job to be held is never one this claim puts on
--         its last attempt (a crash of the consumer holding it would end it unrun): the walk
--         stops before it. Under a rate limit (the queue's, the groups' default or a group's
--         own, a kind's) no job is claimed to be held: n is cut to slots
--
-- Replies: {id, payload, token, attempt, group, kind, max_attempts, retry, wait, …}: nine elements
-- per job handed out (at most n), in claim order — token: the row's attempts after this claim;
-- attempt: the attempts the job has used with this one (token - free); group: '' for a flat job;
-- kind: '' for a raw job; max_attempts: its budget (its own, else ARGV[4]); retry: its own retry
-- policy's text, '' for none; wait: the ms it waited ready, from the time its rank tells
-- (emq_rank_ready) to now, '' when its rank tells none — then two last elements: wait, the µs until a rate limit admits a
-- start again when one held work back (the queue's while it admits none, else the earliest group's
-- in `throttled`), 0 when none does; and 1 when it is the queue's (nothing of the queue starts
-- sooner), else 0. {0, 0} when no job is handed out and none waits. Error EMQARGS.
local ring, groups, pending, active = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local throttled, tats = KEYS[7], KEYS[8]
local base = ARGV[1]
local n, lease, maxdef = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local recmax, maxbytes = tonumber(ARGV[5]), tonumber(ARGV[6])
if not n or n < 1 or n > 1000 then return emq_bad_args('claim', 'n') end
-- a whole, finite lease only (tonumber takes 'inf' and 'nan'): a deadline at +inf is past every
-- recovery range, and a job leased so would never be recovered
if not emq_whole(lease, 1) then return emq_bad_args('claim', 'lease') end
if not emq_whole(maxdef, 1) then return emq_bad_args('claim', 'max_attempts') end
if not recmax then return emq_bad_args('claim', 'settle options') end
if not maxbytes or maxbytes < 1 then return emq_bad_args('claim', 'max bytes') end
-- the kinds run (nil: every kind), as a set and in the caller's order
local nkinds = tonumber(ARGV[7] or '0')
if not emq_whole(nkinds, 0) or #ARGV ~= 7 + nkinds and #ARGV ~= 8 + nkinds and not (nkinds == 0 and #ARGV == 6) then
  return emq_bad_args('claim', 'kinds')
end
local slots = n
if #ARGV == 8 + nkinds then
  slots = tonumber(ARGV[8 + nkinds])
  if not emq_whole(slots, 0) or slots > n then return emq_bad_args('claim', 'slots') end
end
local runs, kind_list = nil, {}
if nkinds > 0 then
  runs = {}
  -- each kind once: two walks of one set would take its jobs out twice
  for i = 1, nkinds do
    if not runs[ARGV[7 + i]] then
      runs[ARGV[7 + i]] = true
      kind_list[#kind_list + 1] = ARGV[7 + i]
    end
  end
end
local call, jobs = redis.call, base .. 'job:'
-- the queue's settings, in one read: its limit and the groups' default (each group's own is read
-- with its fields), the count of the lanes' jobs, whether its flat sets by kind are whole, the
-- count of kinds with a limit of their own, and whether '~' is on the ring (r:~)
local specs = call('HMGET', groups, 'rate', 'rate:~', 'lane_jobs', 'by_kind', 'kind_limits', 'r:~')
-- the idle path (a parked consumer's beat) ends here: no flat job ('~' off the ring), an empty
-- ring, and no lane job (the count the queue keeps; one that keeps none yet: no group held back in
-- `throttled` either). A ring left with members whose lanes emptied goes on: the walk drops them.
-- A queue that keeps no count yet starts one here (so that its next idle claims end on two reads),
-- unless it is being obliterated (the count would outlive it).
local ring_read = nil
if not specs[6] then
  ring_read = call('LLEN', ring)
  if ring_read == 0 and (specs[3] == '0' or not specs[3] and call('ZCARD', throttled) == 0) then
    if not specs[3] and not call('MGET', KEYS[6])[1] then
      call('HSETNX', groups, 'lane_jobs', emq_lane_jobs_of(base, nil).n)
    end
    return {0, 0}
  end
end
-- a queue an earlier version wrote, or one no claim found work in yet, keeps no count of its
-- lanes' jobs nor of its limited kinds (kind_limits, which set_rate_limit keeps): each counted
-- here, and kept from this claim on
local lanes_held = emq_lane_jobs_of(base, specs[3])
-- no lane holds a job: the ring holds at most '~' (on it while pending holds a job, at most once,
-- flagged r:~) and groups whose lanes emptied, and no group is throttled with work; the walk
-- knows the ring without reading it and leaves it as it was unless it drops '~' (the other
-- members, and groups left in `throttled`, are dropped by a later claim that walks the lanes)
local flat_only = lanes_held.n == 0
-- paused or obliterating (strings); the MGET reaches the pending tally's keys too (a hash and a
-- sorted set, which it answers nil), so a refusal of them comes before any write
local flags = call('MGET', KEYS[5], KEYS[6], base .. 'pending_tally', base .. 'pending_since')
if flags[1] or flags[2] then return {0, 0} end
local ring_len = 1
if not flat_only then ring_len = ring_read or call('LLEN', ring) end
local now_us = emq_now_us()
local now = math.floor(now_us / 1000)
local kind_limits, kind_limits_new = tonumber(specs[5]), nil
if not kind_limits then
  kind_limits = call('HLEN', base .. 'kind_rates')
  kind_limits_new = kind_limits
end
local kind_limited = kind_limits > 0
if runs or kind_limited then emq_kinds_fill(base, specs[4]) end
-- each kind's own limit met (kind_rate), false for none; kind_wake: the earliest admission of a
-- kind whose limit held a job back
local krates, krate_list, kind_wake = {}, {}, nil
local function kind_rate(kind)
  if not kind_limited or not kind then return nil end
  local r = krates[kind]
  if r == nil then
    local spec = call('HGET', base .. 'kind_rates', kind)
    r = false
    if spec then
      r = emq_rate_read(spec, redis.pcall('ZSCORE', base .. 'kind_tats', kind), now_us, base .. 'kind_starts:' .. kind) or false
    end
    krates[kind] = r
    if r then krate_list[#krate_list + 1] = { kind = kind, r = r } end
  end
  return r
end
-- a job held back by its kind's limit r: the claim's wait counts r's next admission
local function kind_held(r)
  local at = emq_rate_next(r)
  if not kind_wake or at < kind_wake then kind_wake = at end
end
local qrate = emq_rate_read(specs[1], specs[1] and redis.pcall('GET', KEYS[9]), now_us, base .. 'starts')
local default_rate = specs[2]
-- under the queue's limit, the groups' default or a kind's, nothing is claimed to be held
if qrate or default_rate or kind_limited then n = math.min(n, slots) end

-- The walk, from reads alone.
-- The ring as the walk sees it: its members as they were (read in pages, `popped` of them taken
-- off its head), then the members pushed back at its tail (`back`, `repopped` of them taken again).
local members_read, popped = {}, 0
if flat_only then members_read[1] = '~' end
local back, repopped = {}, 0
-- the throttled groups due again join the walk at the ring's tail (a page at most: the rest next time)
local due = {}
if not flat_only then due = call('ZRANGEBYSCORE', throttled, '-inf', now_us, 'LIMIT', 0, 1000) end
for i = 1, #due do back[i] = due[i] end
local function pop()
  if popped < ring_len then
    if popped == #members_read then
      local page = call('LRANGE', ring, popped, popped + 99)
      for i = 1, #page do members_read[popped + i] = page[i] end
    end
    popped = popped + 1
    return members_read[popped]
  end
  if repopped < #back then
    repopped = repopped + 1
    return back[repopped]
  end
  return nil
end

-- each member met, in the order met: its ready jobs (the head of pending or of its lane, read in
-- pages of ids, `taken` of them used, `size` in all) and, for a group, its active count and limit.
-- A member on the ring twice (only by hand) is one member: it never exceeds its limit.
local members, order = {}, {}
local function member(m)
  local s = members[m]
  if s then return s end
  if m == '~' and (runs or kind_limited) then
    -- the sets of the kinds run, or of every kind named in `kinds` ({key, kind, size, ids, ranks,
    -- read, taken, rate} each); total: pending's jobs of every kind; flat_ids: the ids taken,
    -- which leave pending too
    s = { kinds = {}, size = 0, total = call('ZCARD', pending), taken = 0, flat_ids = {} }
    local list = kind_list
    if not runs then list = call('SMEMBERS', base .. 'kinds') end
    for _, k in ipairs(list) do
      local key = base .. 'pending:' .. k
      local size = call('ZCARD', key)
      if size > 0 then
        s.kinds[#s.kinds + 1] = { key = key, kind = k, size = size, ids = {}, ranks = {}, read = 0, taken = 0,
                                  rate = kind_rate(k) }
        s.size = s.size + size
      end
    end
  elseif m == '~' then
    -- pending's size: read when the walk may visit other members (the ring step needs it), else
    -- found by reading its ids (read_ahead)
    local size = math.huge
    if not flat_only then size = call('ZCARD', pending) end
    s = { key = pending, size = size, ids = {}, ranks = {}, read = 0, taken = 0 }
  else
    local f = call('HMGET', groups, 'a:' .. m, 'l:' .. m, 'l:~', 'rate:' .. m, 'hk:' .. m)
    local lane = base .. 'lane:' .. m
    local spec = f[4] or default_rate
    s = { key = lane, size = emq_lane_len(base, m), ids = {}, ranks = {}, read = 0, taken = 0, group = m,
          a = tonumber(f[1]) or 0, limit = tonumber(f[2]) or tonumber(f[3]) or 1, a0 = tonumber(f[1]) or 0,
          hk = f[5] or nil,
          rate = spec and emq_rate_read(spec, redis.pcall('ZSCORE', tats, m), now_us, base .. 'starts:' .. m) or nil }
  end
  members[m] = s
  order[#order + 1] = s
  return s
end

-- s's next page of `ahead` ids read when every id read is taken (`read` of them in all); while
-- s's size is unknown, one id more, and read already when one id read is left, so that a page
-- short of it tells the size before the walk takes s's last job (the ring step drops a member
-- whose jobs are all taken: a '~' kept with pending emptied would stay on the ring)
local function read_ahead(s, ahead)
  local unknown = s.size == math.huge
  if s.read < s.size and (s.taken == s.read or unknown and s.taken + 1 == s.read) then
    if unknown then ahead = ahead + 1 end
    local from, to = s.read, s.read + ahead - 1
    local page = call('ZRANGE', s.key, from, to, 'WITHSCORES')
    for i = 2, #page, 2 do
      s.ids[from + i / 2] = page[i - 1]
      s.ranks[from + i / 2] = page[i]
    end
    s.read = from + #page / 2
    if #page / 2 < ahead then s.size = s.read end
  end
end

-- the next job id of s and its rank; its next page holds `ahead` ids. For the flat sets by kind,
-- the lowest-ranked of the heads of the kinds whose limits admit a start (s.last: its set); nil
-- when none is left (s.stuck when a limit holds the rest back).
local function next_id(s, ahead)
  if s.kinds then
    local best, best_rank = nil, nil
    for _, ks in ipairs(s.kinds) do
      if ks.taken < ks.size then
        if emq_rate_admits(ks.rate, now_us) then
          read_ahead(ks, ahead)
          local r = tonumber(ks.ranks[ks.taken + 1])
          if r and (not best or r < best_rank) then best, best_rank = ks, r end
        else
          kind_held(ks.rate)
          s.stuck = true
        end
      end
    end
    if not best then return nil, nil end
    s.taken = s.taken + 1
    s.last = best
    local id, rank = next_id(best, ahead)
    s.flat_ids[#s.flat_ids + 1] = id
    return id, rank
  end
  read_ahead(s, ahead)
  if s.taken >= s.read then return nil, nil end
  s.taken = s.taken + 1
  return s.ids[s.taken], s.ranks[s.taken]
end

-- whether the consumer runs the job at the head of a group's lane (s): always without kinds; else
-- by its kind (s.head_kind), as hk:<g> keeps it for that head or read from its row (then kept:
-- s.hk_new); a key of another type is taken, to be set aside
local function runs_head(s)
  if not runs and not kind_limited then return true end
  read_ahead(s, 1)
  local id = s.ids[s.taken + 1]
  if not id then return true end
  if s.head ~= id then
    s.head = id
    local kept_id, kept_kind = nil, nil
    if s.hk then kept_id, kept_kind = string.match(s.hk, '^(%S+) (.*)$') end
    if kept_id == id then
      s.head_kind = kept_kind
    else
      local kind = redis.pcall('HGET', jobs .. id, 'kind')
      -- a key of another type, or a missing row: taken, to be set aside or dropped
      if type(kind) == 'table' or (not kind and call('EXISTS', jobs .. id) == 0) then
        s.head_kind = nil
        return true
      end
      s.head_kind = kind or ''
      s.hk_new = id .. ' ' .. s.head_kind
    end
  end
  if not s.head_kind then return true end
  return not runs or runs[s.head_kind] or false
end

-- the queue's priority aging (ms), read when a job of a priority above 0 is first handed out
local aging = nil

-- a job's reply is out[nout + ID] .. out[nout + WAIT] (the names of CLAIM_REPLY_FIELDS in
-- store/verbs/claim.rs, in its order: a test holds them so)
local ID, PAYLOAD, TOKEN, ATTEMPT, GROUP, KIND, MAX_ATTEMPTS, RETRY, WAIT = 1, 2, 3, 4, 5, 6, 7, 8, 9
local PER_JOB = WAIT

-- out: the reply; leases: ZADD's deadline/id pairs; tokens: each handed-out row and its token;
-- by_kind: the ids a claim of every kind took from pending, by their rows' kinds (they leave
-- those kinds' sets); settled: the jobs settled here instead, in the order met ({id, 'dead' or 'cancelled', reason,
-- attempt, and for a key of another type the bytes kept}); met: every id met, with its priority
-- (an id in two ready sets, only by hand, is handed out once); left: the pending tally of every
-- job taken out of its set (a missing row or a key of another type counted at priority 0)
local out, nout, leases, tokens, settled, met, by_kind = {}, 0, {}, {}, {}, {}, {}
local left = emq_tally_new()
-- the lease deadline and the tokens as decimal texts, each formatted once: Redis formats a number
-- passed to redis.call itself, at each use (docs/performance.md: "Numbers passed as text")
local deadline = string.format('%d', now + lease)
local token_texts = {}
local got, bytes, failed, cancelled = 0, 0, 0, 0

-- Read a taken job's row: its fields by name ({foreign = its defect, data} for a key of another
-- type, nil for a missing row).
local function read_row(id)
  local all = redis.pcall('HGETALL', jobs .. id)
  if emq_foreign(all) then
    local defect, data = emq_foreign_read(base, id)
    return { foreign = defect, data = data }
  end
  if #all == 0 then return nil end
  local r = {}
  for i = 1, #all, 2 do
    local k = all[i]
    if k == 'data' then r.data = all[i + 1]
    elseif k == 'state' then r.state = all[i + 1]
    elseif k == 'attempts' then r.attempts = all[i + 1]
    elseif k == 'free' then r.free = all[i + 1]
    elseif k == 'max_attempts' then r.max_attempts = all[i + 1]
    elseif k == 'cancel' then r.cancel = all[i + 1]
    elseif k == 'kind' then r.kind = all[i + 1]
    elseif k == 'waited' then r.waited = all[i + 1]
    elseif k == 'retry' then r.retry = all[i + 1]
    elseif k == 'priority' then r.priority = all[i + 1]
    end
  end
  return r
end

-- Judge a sound row's counts: an absent count is its default (a job never claimed has none: 0
-- attempts, 0 free, ARGV[4]). Returns its defect (nil when sound: 'lease expired on the last
-- attempt' at its budget), the attempts it has used as its record states them (a malformed count
-- as it stands), and its attempts, free and budget.
local function judge_row(r)
  local att, fr, maxa = 0, 0, maxdef
  if r.attempts then att = tonumber(r.attempts) end
  if r.free then fr = tonumber(r.free) end
  if r.max_attempts then maxa = tonumber(r.max_attempts) end
  local defect = nil
  if not r.data then defect = 'malformed row: no data'
  elseif r.state ~= 'pending' then defect = emq_misplaced(r.state, 'a ready set')
  elseif r.attempts and not emq_whole(att, 0) then defect = 'malformed row: attempts ' .. r.attempts
  elseif r.free and (not emq_whole(fr, 0) or fr > att) then defect = 'malformed row: free ' .. r.free
  elseif r.max_attempts and not emq_whole(maxa, 1) then defect = 'malformed row: max_attempts ' .. r.max_attempts
  end
  local used = r.attempts or '0'
  if not defect then used = att - fr end
  return defect, used, att, fr, maxa
end

-- Set a job aside instead of handing it out: settled below as dead or cancelled.
local function set_aside(j)
  settled[#settled + 1] = j
  if j.kind == 'cancelled' then cancelled = cancelled + 1 else failed = failed + 1 end
end

-- Hand a job out: its nine reply fields, its lease and its new token (attempts + 1).
local function hand_out(id, g, rank, p, r, att, fr, maxa)
  local token = att + 1
  bytes = bytes + #r.data
  out[nout + ID] = id
  out[nout + PAYLOAD] = r.data
  out[nout + TOKEN] = token
  out[nout + ATTEMPT] = token - fr
  out[nout + GROUP] = g or ''
  out[nout + KIND] = r.kind or ''
  out[nout + MAX_ATTEMPTS] = maxa
  out[nout + RETRY] = r.retry or ''
  if p > 0 and not aging then aging = tonumber(call('HGET', base .. 'order', 'aging')) or 60000 end
  local ready, wait = emq_rank_ready(rank, p, aging), ''
  if ready then
    wait = now - ready
    if wait < 0 then wait = 0 end
  end
  out[nout + WAIT] = wait
  nout = nout + PER_JOB
  -- the k-th job handed out: its lease's pair and its row's token at 2k - 1 and 2k
  local k = nout / PER_JOB
  leases[2 * k - 1] = deadline
  leases[2 * k] = id
  local text = token_texts[token]
  if not text then
    text = string.format('%d', token)
    token_texts[token] = text
  end
  tokens[2 * k - 1] = jobs .. id
  tokens[2 * k] = text
end

-- Take one job from a member (g: its group, nil for the flat set) at its rank: read its row, judge
-- it, and hand it out or set it aside (a missing row is dropped). It leaves the pending tally
-- either way. True when handed out; false and true when it is a job to be held on its last
-- attempt, left where it is (the caller puts its member's count back: untake).
local function take(id, g, rank)
  rank = tonumber(rank) or 0
  if met[id] then
    emq_tally(left, rank, met[id], -1)
    return false
  end
  met[id] = 0
  local r = read_row(id)
  if not r then
    emq_tally(left, rank, 0, -1)
    return false
  end
  if r.foreign then
    emq_tally(left, rank, 0, -1)
    set_aside({ id = id, kind = 'dead', reason = r.foreign, attempt = '0', foreign = true, data = r.data })
    return false
  end
  -- a job to be held (past the slots) that this claim would put on its last attempt: not taken,
  -- and the walk stops before it
  if got >= slots and not r.cancel then
    local defect, _, att, fr, maxa = judge_row(r)
    if not defect and att - fr + 1 >= maxa then
      met[id] = nil
      return false, true
    end
  end
  local p = 0
  if r.priority then p = tonumber(r.priority) or 0 end
  met[id] = p
  if not g and not runs and not kind_limited then
    local k = r.kind or ''
    local ids = by_kind[k]
    if not ids then
      ids = {}
      by_kind[k] = ids
    end
    ids[#ids + 1] = id
  end
  emq_tally(left, rank, p, -1)
  local defect, used, att, fr, maxa = judge_row(r)
  if not defect and r.cancel then
    set_aside({ id = id, kind = 'cancelled', reason = r.cancel, attempt = used, waited = r.waited })
    return false
  end
  if not defect and att - fr >= maxa then defect = 'lease expired on the last attempt' end
  if defect then
    set_aside({ id = id, kind = 'dead', reason = defect, attempt = used, waited = r.waited })
    return false
  end
  hand_out(id, g, rank, p, r, att, fr, maxa)
  return true
end

-- each pop hands out a job, settles a bad row or drops a member: bounded by n, the ring's length
-- and the bad rows met (a ring full of bad rows cannot keep the script running)
local budget = n + ring_len + #due + 1000
-- the r: flags of the members dropped from the ring; the groups throttled ({group, admission});
-- the members passed over for other kinds' consumers (to the ring's tail, not walked again)
local dropped, held, passed = {}, {}, {}
-- whether the queue's limit stopped the walk
local stopped = false
-- Push a member back at the ring's tail while it is still eligible; a group its rate limit no
-- longer admits is held in `throttled` instead; any other member leaves the ring (its r: flag
-- cleared).
-- whether a kind of the flat sets by kind (s) still has a job whose limit admits a start
local function flat_left(s)
  for _, ks in ipairs(s.kinds) do
    if ks.taken < ks.size and emq_rate_admits(ks.rate, now_us) then return true end
  end
  return false
end

local function push_back(s, m)
  if s.kinds and s.total > 0 and flat_left(s) then
    back[#back + 1] = m
  elseif s.foreign or s.kind_held or (s.unslotted and s.taken < s.size and s.a < s.limit) or (s.kinds and s.total > 0) then
    passed[#passed + 1] = m
  elseif s.taken < s.size and (not s.group or s.a < s.limit) then
    if s.group and not emq_rate_admits(s.rate, now_us) then
      held[#held + 1] = { m, emq_rate_next(s.rate) }
    else
      back[#back + 1] = m
    end
  else
    dropped[#dropped + 1] = 'r:' .. m
  end
end

-- a job taken out of s's reads put back (take's last attempt to be held): s's count, and for the
-- flat sets by kind its set's and the ids leaving pending
local function untake(s)
  s.taken = s.taken - 1
  if s.kinds then
    s.last.taken = s.last.taken - 1
    s.flat_ids[#s.flat_ids] = nil
  end
end
-- whether the walk stopped before a job to be held on its last attempt
local last_held = false

while got < n and bytes < maxbytes and budget > 0 and not last_held do
  if not emq_rate_admits(qrate, now_us) then
    stopped = true
    break
  end
  budget = budget - 1
  local m = pop()
  if not m then break end
  local s = member(m)
  if not s.group then
    local want = 1
    if ring_len - popped + #back - repopped == 0 then want = n - got end
    local used = 0
    while used < want and bytes < maxbytes and s.taken < s.size and emq_rate_admits(qrate, now_us) do
      used = used + 1
      local id, rank = next_id(s, n - got)
      if not id then break end
      -- `pending` is the truth: an id of a set by kind that left it (taken by a claim of an earlier
      -- version, or its row deleted) is a stale entry, dropped with the set's head and not taken
      -- (its tally left with it)
      if s.kinds and not call('ZSCORE', pending, id) then
        used = used - 1
      else
        local handed, last = take(id, nil, rank)
        if last then
          untake(s)
          last_held = true
          break
        elseif handed then
          got = got + 1
          emq_rate_take(qrate)
          if s.last then emq_rate_take(s.last.rate) end
        end
      end
    end
  elseif s.a < s.limit and s.taken < s.size and emq_rate_admits(s.rate, now_us) then
    s.foreign = not runs_head(s)
    -- a head its kind's limit holds back: the lane is passed over
    local kr = not s.foreign and kind_rate(s.head_kind)
    if kr and not emq_rate_admits(kr, now_us) then
      s.kind_held = true
      kind_held(kr)
    end
  end
  -- a group under a limit of its own starts only on a free slot: past them, it waits at the ring's
  -- tail, not walked again in this claim
  if s.group and s.rate and got >= slots then s.unslotted = true end
  if s.group and not s.foreign and not s.kind_held and not s.unslotted and s.a < s.limit and s.taken < s.size
      and emq_rate_admits(s.rate, now_us) then
    local kr = kind_rate(s.head_kind)
    local id, rank = next_id(s, n - got)
    local handed, last = take(id, m, rank)
    if last then
      untake(s)
      last_held = true
    elseif handed then
      got = got + 1
      s.a = s.a + 1
      emq_rate_take(s.rate)
      emq_rate_take(qrate)
      emq_rate_take(kr)
    end
  end
  push_back(s, m)
end
-- the wake tokens forwarded to the kinds of the lanes passed over
local forward, forward_kinds = {}, {}
for _, s in ipairs(order) do
  if s.foreign then
    if not forward[s.head_kind] then forward_kinds[#forward_kinds + 1] = s.head_kind end
    forward[s.head_kind] = (forward[s.head_kind] or 0) + 1
  end
end
-- the wait: the queue's next admission while it admits none, else the earliest group's in
-- throttled once this claim's moves are written (the first not taken due, or one throttled here)
local wake_at = nil
if stopped then
  wake_at = emq_rate_next(qrate)
else
  local first = {}
  if not flat_only then first = call('ZRANGE', throttled, #due, #due, 'WITHSCORES') end
  if first[2] then wake_at = tonumber(first[2]) end
  for _, h in ipairs(held) do
    if not wake_at or h[2] < wake_at then wake_at = h[2] end
  end
  if kind_wake and (not wake_at or kind_wake < wake_at) then wake_at = kind_wake end
end
local wait = 0
if wake_at then
  wait = math.ceil(wake_at - now_us)
  if wait < 1 then wait = 1 end
end

-- The rest of the reads: the keys only written below.
-- the members pushed back (and not taken again) or passed over, for the ring's tail
local rest = {}
for i = repopped + 1, #back do rest[#rest + 1] = back[i] end
for _, m in ipairs(passed) do rest[#rest + 1] = m end
-- a walk of '~' alone (flat_only): kept (or not reached: a limit admitted nothing), '~' stays where
-- it stands on the ring; dropped, no job is ready anywhere, so each other member of the ring is a
-- group whose lane emptied: the ring is read here and deleted, every member's r: flag with it
local ring_stale = nil
if flat_only then
  if popped > 0 and #rest == 0 then
    ring_stale = call('LRANGE', ring, 0, -1)
    for _, m in ipairs(ring_stale) do
      if m ~= '~' then dropped[#dropped + 1] = 'r:' .. m end
    end
  end
  rest = {}
end
if #settled > 0 then
  local touch = {}
  if failed > 0 then
    touch[#touch + 1] = 'dead'
    touch[#touch + 1] = 'metrics:failed'
  end
  if cancelled > 0 then touch[#touch + 1] = 'metrics:cancelled' end
  if recmax > 0 then touch[#touch + 1] = 'completions' end
  emq_touch(base, touch)
end
-- the wake lists of the kinds forwarded to
if #forward_kinds > 0 then
  local lists = {}
  for i, k in ipairs(forward_kinds) do lists[i] = 'wake:' .. k end
  emq_touch(base, lists)
end
-- the sets by kind a claim of every kind takes its jobs out of
-- (all but the first: its ZREM is the claim's first write, which a refusal leaves undone)
local by_kind_keys = {}
for k in pairs(by_kind) do by_kind_keys[#by_kind_keys + 1] = 'pending:' .. k end
if #by_kind_keys > 1 then emq_touch(base, { unpack(by_kind_keys, 2) }) end
local ret = { keep = 0, expired = {} }
if cancelled > 0 then ret = emq_retention_read(base, 'cancelled', cancelled, now) end
-- the count of the lanes' jobs, which the lane jobs taken leave
local laned = 0
for _, s in ipairs(order) do
  if s.group then laned = laned + s.taken end
end
-- an exact group limit's log kept in start_logs, so that obliterate finds it
for _, s in ipairs(order) do
  if s.rate and s.rate.log and s.rate.log.taken > 0 and s.rate.log.len == 0 then
    emq_touch(base, { 'start_logs' })
    break
  end
end

-- The writes: first the taken ids out of their kinds' sets (a claim of every kind), in the
-- order of by_kind_keys.
for _, key in ipairs(by_kind_keys) do emq_bulk('ZREM', base .. key, by_kind[string.sub(key, 9)]) end
-- the ring: the members popped leave its head, those pushed back and not taken again join its
-- tail; a walk of '~' alone leaves it as it was, or deletes it with its stale members
if ring_stale then call('DEL', ring) end
if popped > 0 and not flat_only then call('LTRIM', ring, popped, -1) end
emq_expire(base, ret)
if #rest > 0 then emq_bulk('RPUSH', ring, rest) end
-- each member's jobs used leave its set (and a flat job both pending and its kind's set), and the
-- pending tally
for _, s in ipairs(order) do
  if s.kinds then
    for _, ks in ipairs(s.kinds) do
      if ks.taken > 0 then call('ZREMRANGEBYRANK', ks.key, 0, ks.taken - 1) end
    end
    if #s.flat_ids > 0 then emq_bulk('ZREM', pending, s.flat_ids) end
  elseif s.taken > 0 then
    call('ZREMRANGEBYRANK', s.key, 0, s.taken - 1)
  end
end
emq_tally_write(base, left)
-- the groups hash: the dropped members' flags (and the kept head kinds of the lanes taken from)
-- first, then each group's active count, the lanes' count and the head kinds of the lanes passed
-- over
for _, s in ipairs(order) do
  if s.hk and s.taken > 0 then dropped[#dropped + 1] = 'hk:' .. s.group end
end
if #dropped > 0 then emq_bulk('HDEL', groups, dropped) end
local counts = {}
for _, s in ipairs(order) do
  if s.group and s.a ~= s.a0 then
    counts[#counts + 1] = 'a:' .. s.group
    counts[#counts + 1] = s.a
  end
  if s.hk_new and (s.foreign or s.kind_held) then
    counts[#counts + 1] = 'hk:' .. s.group
    counts[#counts + 1] = s.hk_new
  end
end
if laned > 0 or not lanes_held.kept then
  counts[#counts + 1] = 'lane_jobs'
  counts[#counts + 1] = lanes_held.n - laned
end
if kind_limits_new then
  counts[#counts + 1] = 'kind_limits'
  counts[#counts + 1] = kind_limits_new
end
if #counts > 0 then emq_bulk('HSET', groups, counts) end
for i = 1, #tokens, 2 do call('HSET', tokens[i], 'state', 'active', 'attempts', tokens[i + 1]) end
if #leases > 0 then emq_bulk('ZADD', active, leases) end
-- the limits: the due groups leave throttled, the groups throttled here join it; the TATs moved
if #due > 0 then emq_bulk('ZREM', throttled, due) end
local later, moved = {}, {}
for _, h in ipairs(held) do
  later[#later + 1] = math.ceil(h[2])
  later[#later + 1] = h[1]
end
if #later > 0 then emq_bulk('ZADD', throttled, later) end
for _, s in ipairs(order) do
  if s.rate and s.rate.moved then
    moved[#moved + 1] = math.ceil(s.rate.tat)
    moved[#moved + 1] = s.group
  end
end
if #moved > 0 then
  call('ZREMRANGEBYSCORE', tats, '-inf', now_us)
  emq_bulk('ZADD', tats, moved)
end
if qrate and qrate.moved then call('SET', KEYS[9], math.ceil(qrate.tat)) end
local kmoved = {}
for _, k in ipairs(krate_list) do
  if k.r.moved then
    kmoved[#kmoved + 1] = math.ceil(k.r.tat)
    kmoved[#kmoved + 1] = k.kind
  end
  emq_rate_log_write(k.r, now_us)
end
if #kmoved > 0 then
  call('ZREMRANGEBYSCORE', base .. 'kind_tats', '-inf', now_us)
  emq_bulk('ZADD', base .. 'kind_tats', kmoved)
end
emq_rate_log_write(qrate, now_us)
for _, s in ipairs(order) do
  if emq_rate_log_write(s.rate, now_us) then call('SADD', base .. 'start_logs', s.group) end
end
for _, k in ipairs(forward_kinds) do emq_push_tokens(base .. 'wake:' .. k, forward[k]) end
for _, j in ipairs(settled) do
  if j.kind == 'cancelled' then
    emq_finish(base, j.id, 'cancelled', now, ret, 'last_error', j.reason)
  elseif j.foreign then
    emq_bury_foreign(base, j.id, now, j.reason, j.data)
  else
    emq_bury(base, j.id, now, j.reason)
  end
  emq_record(base, recmax, j.id, j.kind, j.attempt, 'error', j.reason, now)
  emq_notify(base, j.waited, j.id)
end
emq_count(base, 'failed', failed, now)
emq_count(base, 'cancelled', cancelled, now)
out[nout + 1] = wait
out[nout + 2] = stopped and 1 or 0
return out
