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
local active, pending, dead = KEYS[1], KEYS[2], KEYS[3]
local p = ARGV[1]
local maxst, lim = tonumber(ARGV[2]), tonumber(ARGV[3])
if not maxst or maxst < 1 or not lim or lim < 1 then
  return redis.error_reply('EMQARGS sweep_stalled: max_stalled and limit must be >= 1')
end
local groups = p .. 'groups'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local exp = redis.call('ZRANGEBYSCORE', active, '-inf', now, 'LIMIT', 0, lim)

-- The reads. rows[i]: {state, group, stalled} (state false: a missing row, dropped), or for a key
-- of another type {foreign = its defect, data = a string's bytes}; lanes[g]: g's active count, ring
-- flag, limit and lane length, kept up to date by the writes below.
-- the length of a lane (a sorted set, recovered jobs at rank 0, the front). One an earlier
-- version wrote as a list is turned into the sorted set first, its order kept (ranks 1, 2, …):
-- the one write before the reads end, which leaves the same jobs waiting in the same order.
local function lane_len(lane)
  local n = redis.pcall('ZCARD', lane)
  if type(n) == 'number' then return n end
  if string.sub(n['err'], 1, 9) ~= 'WRONGTYPE' then error(n) end
  local ids = redis.call('LRANGE', lane, 0, -1)
  redis.call('DEL', lane)
  for i, id in ipairs(ids) do redis.call('ZADD', lane, i, id) end
  return #ids
end

local rows, lanes = {}, {}
local flat_ringed = nil -- the flat set's ring flag, read when a flat job may recover
-- the count of the lanes' jobs (the groups hash's lane_jobs), when the queue keeps one: a lane job
-- recovered joins it
local lane_count = nil
local dies, recovers, lane_jobs = false, false, false
for i, id in ipairs(exp) do
  local jk = p .. 'job:' .. id
  -- by pcall: a key of another type at a row's key (only by hand) is buried below
  local row = redis.pcall('HMGET', jk, 'state', 'group', 'stalled', 'waited')
  if row['err'] then
    if string.sub(row['err'], 1, 9) ~= 'WRONGTYPE' then return row end
    local kind = redis.call('TYPE', jk)['ok']
    row = { foreign = 'malformed row: a ' .. kind .. ', not a hash' }
    if kind == 'string' then row.data = redis.call('GET', jk) end
    dies = true
  elseif row[1] then
    local g = row[2]
    if (tonumber(row[3]) or 0) + 1 >= maxst then dies = true else recovers = true end
    if g then
      if not lane_jobs then lane_count = redis.call('HGET', groups, 'lane_jobs') end
      lane_jobs = true
      if not lanes[g] then
        local f = redis.call('HMGET', groups, 'a:' .. g, 'r:' .. g, 'l:' .. g, 'l:~')
        lanes[g] = {
          a = tonumber(f[1]) or 0,
          ringed = f[2] and true or false,
          limit = tonumber(f[3]) or tonumber(f[4]) or 1,
          len = lane_len(p .. 'lane:' .. g),
        }
      end
    elseif flat_ringed == nil then
      flat_ringed = redis.call('HEXISTS', groups, 'r:~') == 1
    end
  end
  rows[i] = row
end
local paused = redis.call('EXISTS', p .. 'paused') == 1
-- the keys only written below
local touch = {}
if dies then
  touch[#touch + 1] = dead
  touch[#touch + 1] = p .. 'metrics:failed'
end
if recovers then
  touch[#touch + 1] = pending
  touch[#touch + 1] = p .. 'metrics:stalled'
end
if recovers or lane_jobs then
  touch[#touch + 1] = p .. 'ring'
  touch[#touch + 1] = p .. 'wake'
end
if #touch > 0 then redis.call('EXISTS', unpack(touch)) end

-- The writes, walked backwards; the reply lists are put back in lapse order below
local recovered, buried = {}, {}
local flat = false
local freed = 0 -- groups a dead-lettered lane job put back on the ring: each made a job claimable
for i = #exp, 1, -1 do
  local id = exp[i]
  redis.call('ZREM', active, id)
  local jk = p .. 'job:' .. id
  local row = rows[i]
  if row.foreign then
    -- a dead row naming the defect, a string's bytes kept as its data; its group, and so its
    -- slot, unknown
    redis.call('DEL', jk)
    if row.data then
      redis.call('HSET', jk, 'data', row.data, 'state', 'dead', 'last_error', row.foreign)
    else
      redis.call('HSET', jk, 'state', 'dead', 'last_error', row.foreign)
    end
    redis.call('ZADD', dead, now, id)
    table.insert(buried, id)
  elseif row[1] then
    local g = row[2]
    local s = g and lanes[g]
    if s then -- the slot invariant: the lane job leaves active, its group's slot frees
      s.a = s.a - 1
      if s.a <= 0 then
        s.a = 0
        redis.call('HDEL', groups, 'a:' .. g)
      else
        redis.call('HSET', groups, 'a:' .. g, s.a)
      end
    end
    local stalls = (tonumber(row[3]) or 0) + 1
    if stalls >= maxst then
      redis.call('HSET', jk, 'stalled', stalls, 'state', 'dead', 'last_error', 'stalled')
      redis.call('ZADD', dead, now, id)
      table.insert(buried, id)
      if row[4] then redis.call('PUBLISH', p .. 'finished', id) end
    else
      redis.call('HSET', jk, 'stalled', stalls, 'state', 'pending')
      if s then
        redis.call('ZADD', p .. 'lane:' .. g, 0, id)
        s.len = s.len + 1
        if lane_count then redis.call('HINCRBY', groups, 'lane_jobs', 1) end
      else
        redis.call('ZADD', pending, 0, id)
        flat = true
      end
      table.insert(recovered, id)
    end
    -- the ring step for g (eligible: off the ring, a ready job and a free slot)
    if s and not s.ringed and s.len > 0 and s.a < s.limit then
      redis.call('RPUSH', p .. 'ring', g)
      redis.call('HSET', groups, 'r:' .. g, 1)
      s.ringed = true
      if stalls >= maxst then freed = freed + 1 end
    end
  end
end
if flat and not flat_ringed then -- the ring step for the flat set
  redis.call('RPUSH', p .. 'ring', '~')
  redis.call('HSET', groups, 'r:~', 1)
end
if #buried > 0 then
  redis.call('HINCRBY', p .. 'metrics:failed', 'count', #buried)
  -- this minute's count in the history, as every counting script keeps it (lib/events.lua emq_count)
  local minute = math.floor(now / 60000)
  if redis.call('HINCRBY', p .. 'metrics:failed', 'm' .. minute, #buried) == #buried then
    redis.call('HDEL', p .. 'metrics:failed', 'm' .. (minute - 1440))
  end
end
if #recovered > 0 then redis.call('HINCRBY', p .. 'metrics:stalled', 'count', #recovered) end
local wakes = #recovered + freed
-- one wake per job made claimable, at most 16; none while paused (resume pushes them)
if wakes > 0 and not paused then
  local tokens = {}
  for i = 1, math.min(wakes, 16) do tokens[i] = '1' end
  redis.call('RPUSH', p .. 'wake', unpack(tokens))
  redis.call('LTRIM', p .. 'wake', -16, -1)
end
local function reversed(list)
  local out = {}
  for i = #list, 1, -1 do out[#out + 1] = list[i] end
  return out
end
return {reversed(recovered), reversed(buried)}
