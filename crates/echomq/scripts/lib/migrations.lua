-- lib/migrations.lua — Data an earlier version wrote, met by today's scripts: a lane kept as a list
-- (converted to today's sorted set, its order kept) and a queue that keeps no count of its lanes'
-- jobs (summed by reads alone). A conversion leaves the same jobs waiting in the same order, so it
-- is the one write a script may make before its reads end.

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
