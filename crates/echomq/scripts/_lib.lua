-- _lib.lua — helpers the loader prepends (each script gets those it uses, and what they use in
-- turn) to every script except the self-contained extend_lock.lua and sweep_stalled.lua (those two
-- run as a raw EVAL of the file, with the KEYS, ARGV and replies their headers give).
-- Every key here is the queue base ARGV[1] = 'emq:{q}:' plus a suffix listed in keyspace.rs.
--
-- Reads first. A script reads everything it will read before its first write, and reaches the keys
-- it only writes with emq_touch there too (all but the key of its first write: refused, that write
-- leaves the queue as it was as well). Redis keeps the writes of a script that fails half-way, and
-- on a Redis Cluster any key of a slot being migrated can be refused at any call: a refusal (or any
-- error) before the first write leaves the queue as it was, and once every key the script touches
-- has answered, none of its later calls can be refused. A loop over many jobs reads them all, then
-- writes them all. Helpers named *_read only read and come before the first write; the others
-- write.

-- the store's clock, in ms
local function emq_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- the store's time in µs (the clock of the rate limits); emq_now is its whole ms
local function emq_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- A rate limit (a field rate, rate:~ or rate:<g> of emq:{q}:groups, as set_rate_limit writes it:
-- 'max/per ms/burst') read into its emission interval t = per / max (µs between starts) and its
-- tolerance tol = (burst - 1) × t + slack, slack = min(t / 2, 10 ms), with its TAT (theoretical
-- arrival time, µs; absent or past = now) read from `tat` (a number or nil). GCRA: a start is
-- admitted while tat - now <= tol, and moves tat t later. So at most `burst` starts at once, then
-- one per t, and no window of `per` holds more than max + burst starts; the slack lets a consumer
-- that sleeps until its slot come a little early or late (its timer moves in ms) without losing
-- the slot. nil for no spec, or one no script wrote (no limit).
local function emq_rate_read(spec, tat, now_us)
  if not spec then return nil end
  local max, per, burst = string.match(spec, '^(%d+)/(%d+)/(%d+)$')
  max, per, burst = tonumber(max), tonumber(per), tonumber(burst)
  if not max or max < 1 or per < 1 or burst < 1 then return nil end
  local t = per * 1000 / max
  local slack = t / 2
  if slack > 10000 then slack = 10000 end
  tat = tonumber(tat)
  if not tat or tat < now_us then tat = now_us end
  return { t = t, tol = (burst - 1) * t + slack, tat = tat, moved = false }
end

-- whether limit r (emq_rate_read; nil or false: none) admits a start at now_us
local function emq_rate_admits(r, now_us)
  return not r or r.tat - now_us <= r.tol
end

-- a start under limit r (nil or false: none)
local function emq_rate_take(r)
  if r then
    r.tat = r.tat + r.t
    r.moved = true
  end
end

-- when limit r admits its next start (µs)
local function emq_rate_next(r)
  return r.tat - r.tol
end

-- whether n is a whole number from least up to 2^53 (nil, NaN and the infinities are not: NaN and
-- inf % 1 are NaN)
local function emq_whole(n, least)
  return n ~= nil and n >= least and n < 9007199254740992 and n % 1 == 0
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

-- the rows of these ids (suffixes job:<id>) added to a list of suffixes for emq_touch
local function emq_rows_of(ids, into)
  for _, id in ipairs(ids) do into[#into + 1] = 'job:' .. id end
  return into
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

-- these job rows deleted (the rows reached before the first write: emq_touch of emq_rows_of)
local function emq_del_rows(base, ids)
  local rows = {}
  for i, id in ipairs(ids) do rows[i] = base .. 'job:' .. id end
  emq_bulk('DEL', nil, rows)
end

-- whether the queue is paused: a paused queue makes nothing claimable, so its scripts push no wake
-- (resume pushes them)
local function emq_paused_read(base)
  return redis.call('EXISTS', base .. 'paused') == 1
end

-- one wake token per job made claimable, at most 16, then the list trimmed to its newest 16; none
-- while paused (`paused` as emq_paused_read read it before the first write; `wake` reached then)
local function emq_wake(base, n, paused)
  if n <= 0 or paused then return end
  if n > 16 then n = 16 end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  if redis.call('RPUSH', base .. 'wake', unpack(tokens)) > 16 then
    redis.call('LTRIM', base .. 'wake', '-16', '-1')
  end
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

-- The pending tally, which tells the age of the oldest pending job in O(1). The hash
-- emq:{q}:pending_tally counts the pending jobs (flat and in lanes) of each priority p ranked
-- within each second of rank: field '<p>:<rank second>', the rank second floor(rank / 256000).
-- The sorted set emq:{q}:pending_since holds the same fields, each scored by the Unix ms its first
-- job was made ready: the least score is the oldest pending job's (to within the second its
-- field spans). A job's rank and priority alone name its field, so the script that takes it out
-- finds the field the script that ranked it counted, whatever the aging has become. Jobs at a
-- rank below 256000 are not counted (jobs put back at the front — recovered or released — and the
-- 1, 2, … of a lane an earlier version kept: their rank tells no time), nor are jobs an earlier
-- version ranked: a count that would go below 1 drops its field. Every script that ranks jobs
-- (emq_rank) or takes ranked jobs out of `pending` or a lane tallies them in a table
-- (emq_tally_new) and writes it once (emq_tally_write); it reaches both keys before its first
-- write (emq_tally_touch, or the claim's MGET).
local function emq_tally_new()
  return { fields = {}, n = {}, ms = {} }
end

-- `n` jobs of priority p at `rank` tallied in t: +1 joining (`clock` its rank's clock part, the
-- time it was made ready), -1 leaving (no clock); the field of the last call is kept, as a
-- batch's ranks share one
local function emq_tally(t, rank, p, n, clock)
  if rank < 256000 then return end
  local sec = math.floor(rank / 256000)
  local f
  if sec == t.sec and p == t.p then
    f = t.f
  else
    f = string.format('%s:%s', p, sec)
    t.sec, t.p, t.f = sec, p, f
  end
  local had = t.n[f]
  if had then
    t.n[f] = had + n
  else
    t.n[f] = n
    t.fields[#t.fields + 1] = f
  end
  if clock and not t.ms[f] then t.ms[f] = 1767225600000 + math.floor(clock / 256) end
end

-- the suffixes of the tally's keys added to a list for emq_touch
local function emq_tally_touch(touch)
  touch[#touch + 1] = 'pending_tally'
  touch[#touch + 1] = 'pending_since'
  return touch
end

-- the tally t written: each field's count moved; a field new here joins pending_since at the ms
-- of its first job, and a field left with no job leaves both keys
local function emq_tally_write(base, t)
  for _, f in ipairs(t.fields) do
    local n = t.n[f]
    if n ~= 0 then
      local left = redis.call('HINCRBY', base .. 'pending_tally', f, n)
      if left <= 0 then
        redis.call('HDEL', base .. 'pending_tally', f)
        redis.call('ZREM', base .. 'pending_since', f)
      elseif left == n then
        redis.call('ZADD', base .. 'pending_since', t.ms[f], f)
      end
    end
  end
end

-- how the queue ranks the jobs it makes ready (the hash emq:{q}:order, its fields `clock`, the
-- last rank's clock part, and `aging`, the priority aging in ms, absent = 60000, 0 = strict),
-- read before the first write with the store's time `now` (ms); `touch` (nil for a script that
-- ranks nothing) gains the pending tally's keys. emq_rank ranks with it and tallies each rank;
-- emq_order_write keeps its clock and writes the tally.
local function emq_order_read(base, now, touch)
  local f = redis.call('HMGET', base .. 'order', 'clock', 'aging')
  if touch then emq_tally_touch(touch) end
  return {
    clock = tonumber(f[1]) or 0,
    aging = tonumber(f[2]) or 60000,
    tick = (now - 1767225600000) * 256,
    moved = false,
    tally = emq_tally_new(),
  }
end

-- the rank (score in `pending` or a lane; the least is claimed first) of a job of priority p (0
-- the most urgent .. 9) made ready now: its clock part is the store's time in 1/256 ms since
-- 2026-01-01, or one past the last rank's when that is later, so ranks never repeat and jobs of
-- one priority keep their order (FIFO); a priority p adds p × aging (in the same unit), so a job
-- of priority p goes before every priority-0 job made ready more than p × aging after it; under
-- strict aging (0) it adds p × 9e14, past every clock part, so a lower priority never runs while
-- a higher one waits. Every rank stays below 2^53 (exact in a Lua number and a Redis score).
-- Recovered jobs take rank 0, ahead of all.
local function emq_rank(o, p)
  local c = o.clock + 1
  if c < o.tick then c = o.tick end
  o.clock = c
  o.moved = true
  local rank = c
  if p > 0 then
    if o.aging == 0 then rank = c + p * 900000000000000 else rank = c + p * o.aging * 256 end
  end
  emq_tally(o.tally, rank, p, 1, c)
  return rank
end

-- the time (Unix ms) a job of priority p ranked `rank` was made ready, read back from its rank
-- (emq_rank's, with the queue's aging in ms); nil for a rank that tells none (a recovered job's 0,
-- or the 1, 2, … of a lane an earlier version kept)
local function emq_rank_ready(rank, p, aging)
  local c = rank
  if p > 0 then
    if aging == 0 then c = c - p * 900000000000000 else c = c - p * aging * 256 end
  end
  if c < 256000 then return nil end
  return 1767225600000 + math.floor(c / 256)
end

-- the clock emq_rank moved, written back (`order` reached by emq_order_read), and the ranks it
-- gave tallied
local function emq_order_write(base, o)
  if o.moved then redis.call('HSET', base .. 'order', 'clock', o.clock) end
  emq_tally_write(base, o.tally)
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

-- `added` ready jobs joined the tail of g's lane (s from emq_lane_read, its len counting them): the
-- ring step for g, and how many of them g's free slots make claimable — min(len, free) after the
-- push less min(len - added, free) before it (jobs behind waiting ones that already fill every
-- free slot make nothing claimable)
local function emq_lane_step(base, g, s, added)
  emq_lane_ring(base, g, s)
  local free = s.limit - s.a
  if free < 0 then free = 0 end
  local before = s.len - added
  if before < 0 then before = 0 end
  return math.min(s.len, free) - math.min(before, free)
end

-- a job back at the front of g's lane (s: g's state from emq_lane_read), its row pending
local function emq_lane_front(base, g, s, id)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
  redis.call('ZADD', base .. 'lane:' .. g, 0, id)
  s.len = s.len + 1
  emq_lane_jobs_add(base, s.lj, 1)
end

-- what the flat set's ring step needs, read before the first write: whether '~' is on the ring
-- and how many jobs pending holds
local function emq_flat_read(base)
  return {
    ringed = redis.call('HEXISTS', base .. 'groups', 'r:~') == 1,
    len = redis.call('ZCARD', base .. 'pending'),
  }
end

-- a flat job back in pending at `score` (0 = the front, where recovered jobs go), its row pending
-- (s from emq_flat_read; emq_flat_step follows)
local function emq_flat_ready(base, s, id, score)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
  redis.call('ZADD', base .. 'pending', score, id)
  s.len = s.len + 1
end

-- the flat set's ring step (s from emq_flat_read): '~' pushed at the ring's tail when off it and
-- pending holds a job
local function emq_flat_step(base, s)
  if s.ringed or s.len == 0 then return end
  redis.call('RPUSH', base .. 'ring', '~')
  redis.call('HSET', base .. 'groups', 'r:~', '1')
  s.ringed = true
end

-- the fence of every holder verb: the caller holds the job when the row's attempts equal its token
-- and its id is in `active` (the caller tests that). Returns -1 (gone: no row) or 0 (stale: another
-- token, or none); else nil, the row's group (nil for a flat job) and the HMGET reply, whose fields
-- from the third on are `...`. It reads no state: every script that moves an id into or out of
-- `active` writes the row's state in the same step.
local function emq_fence(jk, token, ...)
  local r = redis.call('HMGET', jk, 'attempts', 'group', ...)
  if r[1] ~= token then
    if r[1] or redis.call('EXISTS', jk) == 1 then return 0 end
    return -1
  end
  return nil, r[2] or nil, r
end

-- the attempts a job has used: its claims (attempts) less the claims that used none (free); a
-- malformed count reads as 0 (claim buries such a row before it is ever held)
local function emq_used(attempts, free)
  return (tonumber(attempts) or 0) - (tonumber(free) or 0)
end

-- an optional value from ARGV: '' = none, else the value behind a one-byte '+' prefix
local function emq_opt(v)
  if v == '' then return nil end
  return string.sub(v, 2)
end

-- a queue's retention (emq:{q}:retention, written by set_retention; a field absent = its default):
-- the newest `keep` rows of each finished state are kept — completed rows in the set `completed`,
-- cancelled rows in `cancelled`, each by finish time (0: a row is deleted as it finishes), each for about
-- `age` ms (trimmed as later jobs of the queue finish), its output only up to `cap` bytes (a
-- longer one is dropped, its size kept as output_dropped). The defaults are those of
-- `Retention::default` (store.rs); a conformance case reads them back on both stores.
local function emq_retention_of(base)
  local f = redis.call('HMGET', base .. 'retention', 'keep', 'age', 'cap')
  return { keep = tonumber(f[1]) or 10000, age = tonumber(f[2]) or 86400000, cap = tonumber(f[3]) or 65536 }
end

-- before `adding` rows finish as `state` (completed, cancelled): the queue's retention
-- (emq_retention_of), the set of that state's kept rows (ret.done), and, when rows are kept, the
-- store's time (ret.now: `now` when the caller has it) and the rows trimming deletes reached — the
-- oldest of the set, those finished more than `age` ms before now (at most 100 a call) or past the
-- newest `keep` — so that its reads and deletes come after no refusal. emq_expire and emq_finish
-- take what it returns.
local function emq_retention_read(base, state, adding, now)
  local ret = emq_retention_of(base)
  ret.expired = {}
  ret.done = base .. state
  if ret.keep <= 0 or adding <= 0 then return ret end
  ret.now = now or emq_now()
  local done = ret.done
  ret.expired = redis.call('ZRANGEBYSCORE', done, '-inf', ret.now - ret.age, 'LIMIT', 0, 100)
  local trim = math.max(redis.call('ZCARD', done) + adding - ret.keep, #ret.expired)
  if trim > 0 then emq_touch(base, emq_rows_of(redis.call('ZRANGE', done, 0, trim - 1), {})) end
  return ret
end

-- the kept rows past their age (emq_retention_read's), deleted: the first write of the finishing
-- step, so the count trimming of emq_finish counts without them
local function emq_expire(base, ret)
  if #ret.expired == 0 then return end
  emq_del_rows(base, ret.expired)
  emq_bulk('ZREM', ret.done, ret.expired)
end

-- a finished job (completed / cancelled) under the queue's retention `ret` (emq_retention_read's):
-- deleted, or kept — its state, finish time and value (`field`: the output, or the cancel reason as
-- last_error), its payload dropped — with its state's set (ret.done) trimmed to the newest `keep`
local function emq_finish(base, id, state, now, ret, field, value)
  local jk = base .. 'job:' .. id
  if ret.keep <= 0 then
    redis.call('DEL', jk)
    return
  end
  local row = { 'state', state, 'finished_at', now }
  if value then
    if field == 'output' and #value > ret.cap then
      row[5], row[6] = 'output_dropped', #value
    else
      row[5], row[6] = field, value
    end
  end
  redis.call('HSET', jk, unpack(row))
  -- a kept row holds the outcome, not the payload, and no earlier attempt's error (a cancel's
  -- reason is its last_error)
  if value and field == 'last_error' then
    redis.call('HDEL', jk, 'data')
  else
    redis.call('HDEL', jk, 'data', 'last_error')
  end
  local done = ret.done
  redis.call('ZADD', done, now, id)
  local over = redis.call('ZCARD', done) - ret.keep
  if over > 0 then
    for _, old in ipairs(redis.call('ZRANGE', done, 0, over - 1)) do
      redis.call('DEL', base .. 'job:' .. old)
    end
    redis.call('ZREMRANGEBYRANK', done, 0, over - 1)
  end
end

-- a job a caller waits on (its row's `waited` mark, set by mark_waited) has finished — completed,
-- cancelled or dead: its id published on emq:{q}:finished. Only a marked row costs this command.
local function emq_notify(base, waited, id)
  if waited then redis.call('PUBLISH', base .. 'finished', id) end
end

-- a job to the morgue, scored with the store's time of death
local function emq_bury(base, id, now, err)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'dead', 'last_error', err)
  redis.call('ZADD', base .. 'dead', now, id)
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

-- such a key (emq_foreign_read) becomes a dead row naming the defect, and the id goes to the
-- morgue. A lane job's group is unknown then: its slot stays.
local function emq_bury_foreign(base, id, now, defect, data)
  local jk = base .. 'job:' .. id
  redis.call('DEL', jk)
  if data then redis.call('HSET', jk, 'data', data) end
  emq_bury(base, id, now, defect)
end

-- a completion record, written by the settling script itself (opt-in: recmax > 0 = MAXLEN ~).
-- attempts: the attempts the job has used (emq_used)
local function emq_record(base, recmax, id, status, attempts, field, value, now)
  if recmax <= 0 then return end
  if value then
    redis.call('XADD', base .. 'completions', 'MAXLEN', '~', recmax, '*',
      'id', id, 'status', status, 'attempts', attempts, field, value, 'at', now)
  else
    redis.call('XADD', base .. 'completions', 'MAXLEN', '~', recmax, '*',
      'id', id, 'status', status, 'attempts', attempts, 'at', now)
  end
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

-- a job made ready again, in the flat set or its lane at a fresh rank of its priority `p` (the
-- row's `priority`, 0 when absent; o: emq_order_read's, written back by the caller with
-- emq_order_write); its state pending; s (emq_lane_read's for g, else emq_flat_read's) counts it
local function emq_ready(base, id, g, s, o, p)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
  local rank = emq_rank(o, tonumber(p) or 0)
  if g then
    redis.call('ZADD', base .. 'lane:' .. g, rank, id)
    emq_lane_jobs_add(base, s.lj, 1)
  else
    redis.call('ZADD', base .. 'pending', rank, id)
  end
  s.len = s.len + 1
end

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
    touch[#touch + 1] = 'wake'
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

-- a refusal of malformed arguments, before anything is written
local function emq_bad_args(verb, what)
  return redis.error_reply('EMQARGS ' .. verb .. ': ' .. what)
end

-- ready new jobs published: to the flat set or g's lane (`ready` = rank/id pairs, emq_rank's),
-- then the ring step and one wake per job made claimable. s: the flat set's or g's state
-- (emq_flat_read, emq_lane_read), `paused` and the ranking `o` (its clock written back), read
-- before the first write.
local function emq_publish_ready(base, g, s, ready, paused, o)
  if #ready == 0 then return end
  local added = #ready / 2
  emq_order_write(base, o)
  if g then
    emq_bulk('ZADD', base .. 'lane:' .. g, ready)
    emq_lane_jobs_add(base, s.lj, added)
    s.len = s.len + added
    emq_wake(base, emq_lane_step(base, g, s, added), paused)
  else
    emq_bulk('ZADD', base .. 'pending', ready)
    s.len = s.len + added
    emq_flat_step(base, s)
    emq_wake(base, added, paused)
  end
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
-- how it ranks them (emq_order_read); `touch` gains the keys only written
local function emq_publish_read(base, g, nready, touch)
  if nready == 0 then return nil, false, nil end
  touch[#touch + 1] = 'ring'
  touch[#touch + 1] = 'wake'
  local s
  if g then s = emq_lane_read({}, base, g, true) else s = emq_flat_read(base) end
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

-- where a waiting job (pending or scheduled) waits, read before the first write: w.key, the key
-- (a suffix of the queue base; a lane by emq_lane_len, which converts one an earlier version
-- wrote) for emq_touch and emq_unwait; for a lane, w.lj, the count of the lanes' jobs
-- (emq_lane_jobs_of); for a pending job, w.left, the pending tally of its leaving (its rank and
-- priority read, the tally's keys reached)
local function emq_waits_in_read(base, state, g, id)
  if state == 'scheduled' then return { key = 'scheduled' } end
  local w = { key = 'pending' }
  if g then
    emq_lane_len(base, g)
    w.key = 'lane:' .. g
    w.lj = emq_lane_jobs_of(base, redis.call('HGET', base .. 'groups', 'lane_jobs'))
  end
  local rank = tonumber(redis.call('ZSCORE', base .. w.key, id))
  if rank then
    local p = tonumber(redis.call('HGET', base .. 'job:' .. id, 'priority')) or 0
    w.left = emq_tally_new()
    emq_tally(w.left, rank, p, -1)
    emq_touch(base, emq_tally_touch({}))
  end
  return w
end

-- a waiting job taken out of where it waits (w: emq_waits_in_read's); false when the row says it
-- waits but it is not there
local function emq_unwait(base, id, w)
  local gone = redis.call('ZREM', base .. w.key, id) == 1
  if gone and w.lj then emq_lane_jobs_add(base, w.lj, -1) end
  if gone and w.left then emq_tally_write(base, w.left) end
  return gone
end

-- The dedup sweep. `dedup` keeps a key until an enqueue of it looks at it, which for a key used
-- once (an order's id) would be never; the sweep drops the keys no enqueue could still answer with
-- their holder. The sorted set `dedup_sweep` holds each key taken, scored `look × 32 + level`: the
-- key is due from `look` (ms: its window's end, or a minute after it was taken) on, and a look that
-- finds it still held puts the next 2^level minutes later (level at most 11, about 34 hours), so a
-- key is looked at about log2 of its holder's minutes times. A key is held while its window has not
-- ended or its holder is pending, scheduled or active (what an enqueue of any mode could still
-- answer with it); otherwise it leaves both. Reads the due keys, at most `budget`, but those in
-- `skip` (the keys the caller takes and writes itself); returns what emq_dedup_sweep_write writes.
local function emq_dedup_sweep_read(base, now, budget, skip)
  local due = redis.call('ZRANGEBYSCORE', base .. 'dedup_sweep', '-inf', now * 32 + 31,
    'WITHSCORES', 'LIMIT', 0, budget)
  local s = { drop = {}, gone = {}, again = {} }
  for i = 1, #due, 2 do
    local key = due[i]
    if not skip[key] then
      local h = redis.call('HGET', base .. 'dedup', key)
      local holder, till = nil, nil
      if h then holder, till = string.match(h, '^([^|]+)|?(%d*)$') end
      local held = holder ~= nil and (tonumber(till) or 0) > now
      if holder and not held then
        local st = redis.call('HGET', base .. 'job:' .. holder, 'state')
        held = st == 'pending' or st == 'scheduled' or st == 'active'
      end
      if held then
        local level = math.min(tonumber(due[i + 1]) % 32, 11)
        s.again[#s.again + 1] = (now + 60000 * 2 ^ level) * 32 + math.min(level + 1, 11)
        s.again[#s.again + 1] = key
      else
        s.drop[#s.drop + 1] = key
        if h then s.gone[#s.gone + 1] = key end
      end
    end
  end
  return s
end

-- the writes of a sweep read by emq_dedup_sweep_read: keys let go, keys still held looked at later
local function emq_dedup_sweep_write(base, s)
  if #s.gone > 0 then emq_bulk('HDEL', base .. 'dedup', s.gone) end
  if #s.drop > 0 then emq_bulk('ZREM', base .. 'dedup_sweep', s.drop) end
  if #s.again > 0 then emq_bulk('ZADD', base .. 'dedup_sweep', s.again) end
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
  local n = tonumber(ARGV[o])
  local plain = n and #ARGV == o + n
  if not n or n < 1 or n > 1000 or not (plain or #ARGV == o + 8 * n) then
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
    local a = o + 8 * (i - 1)
    local id, delay, maxa, prio, dd = ARGV[a + 1], tonumber(ARGV[a + 2]), ARGV[a + 3], ARGV[a + 5], ARGV[a + 7]
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
        if mode == 'd' then bounce[i] = true; payload_at[first_of[key]] = a + 8 end
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
      if ARGV[o + 8 * (i - 1) + 1] == '' then touch[#touch + 1] = 'job:' .. texts[k] end
    end
  end
  local bounced = false
  for i = 1, n do
    if bounce[i] and type(held[i]) == 'string' then bounced = true end
  end
  if nsched > 0 or bounced then touch[#touch + 1] = 'scheduled' end
  for _, u in pairs(unwait) do touch[#touch + 1] = u.key end
  if sweep then
    touch[#touch + 1] = 'dedup'
    touch[#touch + 1] = 'dedup_sweep'
  end
  local s, paused, order = emq_publish_read(base, g, nready, touch)
  emq_touch(base, touch)
  -- then write
  local reply, ready, sched, ids = { seq + 1, owed }, {}, {}, {}
  -- the keys taken: each with its holder in `dedup`, and its first look in `dedup_sweep`
  local holders, looks = {}, {}
  if fresh > 0 then redis.call('INCRBY', base .. 'id', fresh) end
  k = 0
  for i = 1, n do
    local a = o + 8 * (i - 1)
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
          redis.call('HSET', base .. 'job:' .. h, 'data', ARGV[a + 8], 'state', 'scheduled', 'run_at', now + delays[i])
          sched[#sched + 1] = now + delays[i]
          sched[#sched + 1] = h
        end
      else
        reply[#reply + 1] = i
        reply[#reply + 1] = h
      end
    else
      k = k + 1
      local id, delay, maxa, kind = ARGV[a + 1], delays[i], ARGV[a + 3], ARGV[a + 4]
      local prio, retry = ARGV[a + 5], ARGV[a + 6]
      local data = ARGV[payload_at[i] or (a + 8)]
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
      end
    end
  end
  if sweep then
    emq_bulk('HSET', base .. 'dedup', holders)
    emq_bulk('ZADD', base .. 'dedup_sweep', looks)
    emq_dedup_sweep_write(base, sweep)
  end
  if #sched > 0 then emq_bulk('ZADD', base .. 'scheduled', sched) end
  emq_publish_ready(base, g, s, ready, paused, order)
  emq_registration_write(base, owed, fresh_life)
  return reply
end

-- the first `budget` members of a sorted set of job ids (drain, obliterate); none once the budget
-- is spent. With `ranks`, a table, their scores go there in order.
local function emq_zset_head_read(key, budget, ranks)
  if budget <= 0 then return {} end
  if not ranks then return redis.call('ZRANGE', key, 0, budget - 1) end
  local page, ids = redis.call('ZRANGE', key, 0, budget - 1, 'WITHSCORES'), {}
  for i = 2, #page, 2 do
    ids[i / 2] = page[i - 1]
    ranks[i / 2] = tonumber(page[i])
  end
  return ids
end

-- the pending tally of ready jobs deleted with their rows (drain): `ids` at `ranks` (as
-- emq_zset_head_read reads them), tallied in t as leaving, their priorities read
local function emq_tally_leaving_read(base, t, ids, ranks)
  for i, id in ipairs(ids) do
    emq_tally(t, ranks[i], tonumber(redis.call('HGET', base .. 'job:' .. id, 'priority')) or 0, -1)
  end
end

-- members of a sorted set of job ids (emq_zset_head_read's) deleted with their rows
local function emq_zset_purge(base, key, ids)
  if #ids == 0 then return end
  emq_del_rows(base, ids)
  emq_bulk('ZREM', key, ids)
end

-- one page of the groups hash from `cursor` (HSCAN, COUNT 100): its field names in order, and the
-- next cursor
local function emq_groups_page_read(base, cursor)
  local scan = redis.call('HSCAN', base .. 'groups', cursor, 'COUNT', 100)
  local fields = {}
  for i = 1, #scan[2], 2 do fields[#fields + 1] = scan[2][i] end
  return fields, scan[1]
end

-- the lanes walk of drain and obliterate, from reads alone: up to `budget` lane jobs, lane by lane
-- over the groups `fields` names in order (the groups with a non-empty lane are exactly those with
-- an a: or r: field). A group named again is past its first field, where its lane was emptied. The
-- walk stops where the budget is spent or a lane keeps jobs. Returns the cuts ({lane, ids}: the
-- head of each lane, for emq_lanes_cut; with `lj`, the count of the lanes' jobs, emq_lane_jobs_of),
-- the jobs they hold, and whether the walk got through every field.
local function emq_lanes_read(base, budget, fields)
  local cuts, removed, seen = { lj = false }, 0, {}
  for _, f in ipairs(fields) do
    local kind, g = string.sub(f, 1, 2), string.sub(f, 3)
    if (kind == 'a:' or kind == 'r:') and g ~= '~' then
      if budget - removed <= 0 then return cuts, removed, false end
      if not seen[g] then
        seen[g] = true
        local lane = base .. 'lane:' .. g
        local len = emq_lane_len(base, g)
        local ranks = {}
        local ids = emq_zset_head_read(lane, budget - removed, ranks)
        cuts[#cuts + 1] = { lane = lane, ids = ids, ranks = ranks }
        if not cuts.lj then cuts.lj = emq_lane_jobs_of(base, redis.call('HGET', base .. 'groups', 'lane_jobs')) end
        removed = removed + #ids
        if len > #ids then return cuts, removed, false end
      end
    end
  end
  return cuts, removed, true
end

-- the cuts emq_lanes_read planned: each lane's head jobs deleted, rows and entries
local function emq_lanes_cut(base, cuts)
  local cut = 0
  for _, c in ipairs(cuts) do
    if #c.ids > 0 then
      emq_del_rows(base, c.ids)
      redis.call('ZREMRANGEBYRANK', c.lane, 0, #c.ids - 1)
      cut = cut + #c.ids
    end
  end
  if cuts.lj then emq_lane_jobs_add(base, cuts.lj, -cut) end
end

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
-- its state, which emq_ready writes), with its group and priority; read before the first write
local function emq_template_read(key)
  local f = redis.call('HMGET', key, 'data', 'group', 'priority', 'max_attempts', 'retry', 'kind')
  local row = { 'data', f[1] or '' }
  local g, p = nil, 0
  if f[2] and f[2] ~= '' then g = f[2]; row[#row + 1] = 'group'; row[#row + 1] = g end
  if f[3] and f[3] ~= '' then p = tonumber(f[3]) or 0; row[#row + 1] = 'priority'; row[#row + 1] = f[3] end
  if f[4] and f[4] ~= '' then row[#row + 1] = 'max_attempts'; row[#row + 1] = f[4] end
  if f[5] and f[5] ~= '' then row[#row + 1] = 'retry'; row[#row + 1] = f[5] end
  if f[6] and f[6] ~= '' then row[#row + 1] = 'kind'; row[#row + 1] = f[6] end
  return { row = row, g = g, p = p }
end

-- a fired job (a schedule's slot, or a trigger) written ready from its template (t from
-- emq_template_read): its row, then its place in the flat set or its group's lane (s from
-- emq_flat_read or emq_lane_read; o from emq_order_read), as emq_ready makes a job ready
local function emq_fire(base, id, t, s, o)
  redis.call('HSET', base .. 'job:' .. id, unpack(t.row))
  emq_ready(base, id, t.g, s, o, t.p)
end
