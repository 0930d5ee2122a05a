-- lib/ring.lua — The ring and the lanes. A group's state (active count a:<g>, ring flag r:<g>,
-- limit, lane length; the count of the lanes' jobs for a script adding to lanes) is read once per
-- script and kept up to date by the writes; the slot invariant (a:<g> counts the group's active
-- jobs) and the ring step (a member pushed at the ring's tail when eligible: off it, a ready job, a
-- free slot) follow every move; the flat set '~' likewise; a job made ready again.

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

-- a job made ready again, in the flat set (under its `kind`, nil for a raw job) or its lane at a
-- fresh rank of its priority `p` (the row's `priority`, 0 when absent; o: emq_order_read's,
-- written back by the caller with emq_order_write); its state pending; s (emq_lane_read's for g,
-- else emq_flat_read's) counts it
local function emq_ready(base, id, g, s, o, p, kind)
  redis.call('HSET', base .. 'job:' .. id, 'state', 'pending')
  local rank = emq_rank(o, tonumber(p) or 0)
  if g then
    redis.call('ZADD', base .. 'lane:' .. g, rank, id)
    emq_lane_jobs_add(base, s.lj, 1)
    s.len = s.len + 1
  else
    emq_flat_add(base, s, kind or '', { rank, id })
  end
end
