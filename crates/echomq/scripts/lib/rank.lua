-- lib/rank.lua — How ready jobs are ranked (the hash emq:{q}:order, the clock and the priority
-- aging) and the pending tally (pending_tally, pending_since) that every script ranking jobs, or
-- taking ranked jobs out of `pending` or a lane, keeps: read before the first write, ranked and
-- tallied in Lua, written once.

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
