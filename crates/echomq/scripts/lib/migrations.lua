-- lib/migrations.lua — Data an earlier version wrote, met by today's scripts: a lane kept as a list
-- (converted to today's sorted set, its order kept), a queue that keeps no count of its lanes'
-- jobs (summed by reads alone) and one whose flat jobs are not kept by kind (filled once). A
-- conversion leaves the same jobs waiting in the same order, so it is the one write a script may
-- make before its reads end.

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

-- the flat sets by kind (lib/ring.lua) of a queue an earlier version wrote, which kept `pending`
-- alone: filled from pending and its rows' kinds, a page of 1000 at a time, then marked whole (the
-- groups hash's field `by_kind`, which the caller read as `field`: present, nothing to do). Like a
-- lane's conversion, the one write a script may make before its reads end: the same jobs wait in
-- the same order, and a call refused half-way leaves the mark unset, so the next one fills again
-- (ZADD of a member already there changes nothing).
local function emq_kinds_fill(base, field)
  if field then return end
  local pending = base .. 'pending'
  local n = redis.call('ZCARD', pending)
  for from = 0, n - 1, 1000 do
    local page = redis.call('ZRANGE', pending, from, from + 999, 'WITHSCORES')
    local by, kinds = {}, {}
    for i = 1, #page, 2 do
      -- a missing row (false) or a key of another type (an error) waits with the raw jobs
      local kind = redis.pcall('HGET', base .. 'job:' .. page[i], 'kind')
      if type(kind) ~= 'string' then kind = '' end
      local ranked = by[kind]
      if not ranked then
        ranked = {}
        by[kind] = ranked
        kinds[#kinds + 1] = kind
      end
      ranked[#ranked + 1] = page[i + 1]
      ranked[#ranked + 1] = page[i]
    end
    for _, kind in ipairs(kinds) do
      emq_bulk('ZADD', base .. 'pending:' .. kind, by[kind])
      redis.call('SADD', base .. 'kinds', kind)
    end
  end
  redis.call('HSET', base .. 'groups', 'by_kind', '1')
end
