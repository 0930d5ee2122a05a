-- lib/purge.lua — Jobs deleted in bulk (drain, obliterate): heads of sorted sets of ids, the walk
-- over the lanes, each within a budget and planned from reads alone.

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
        cuts[#cuts + 1] = { lane = lane, ids = ids, ranks = ranks, group = g }
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
      -- the lane's head is gone: so is the kind a claim kept of it (hk:<g>)
      redis.call('HDEL', base .. 'groups', 'hk:' .. c.group)
      cut = cut + #c.ids
    end
  end
  if cuts.lj then emq_lane_jobs_add(base, cuts.lj, -cut) end
end
