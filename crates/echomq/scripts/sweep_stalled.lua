-- sweep_stalled — the seed's count-thresholded stalled sweep (EchoMQ.Stalled @sweep_stalled), a
-- self-contained file: a raw EVAL of it runs with the seed's KEYS, ARGV and reply.
-- Every active member whose lease lapsed (score <= now, server clock), at most ARGV[3]: its `stalled`
-- count +1; at or above ARGV[2] it goes dead (last_error "stalled", metrics failed), else back to
-- ready (metrics stalled). DESIGN's fixes: a lane job frees its group's slot and goes to its lane's
-- front, recovered jobs of one lane in the order their leases lapsed (the ring step; a wake per
-- recovered job, and one when a dead-lettered lane job put its group back on the ring); a missing
-- row is dropped from active and reported neither way; a key of another type at a row's key (only
-- by hand) becomes a dead row naming the defect (a string's bytes kept as its data; its group, so
-- its slot, unknown), reported dead, metrics failed; the morgue is scored with the server's time of
-- death.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:pending     (zset, score = sequence; recovered jobs 0)
-- KEYS[3] emq:{q}:dead        (zset, score = time of death ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] max_stalled (>= 1; the seed's default 1)
-- ARGV[3] limit (>= 1; the seed's default 100)
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
-- read every row first (Redis keeps the writes of a script that fails half-way)
local rows = {}
-- by pcall: a key of another type at a row's key (only by hand) is buried below (false here)
for i, id in ipairs(exp) do
  local row = redis.pcall('HMGET', p .. 'job:' .. id, 'state', 'group', 'stalled')
  if row['err'] then
    if string.sub(row['err'], 1, 9) ~= 'WRONGTYPE' then return row end
    row = false
  end
  rows[i] = row
end
-- walked backwards (each LPUSH puts a job ahead of the one lapsed after it, so recovered lane jobs
-- keep their order at the lane's front); the reply lists are put back in lapse order below
local recovered, buried = {}, {}
local flat = false
local freed = 0 -- groups a dead-lettered lane job put back on the ring: each made a job claimable
for i = #exp, 1, -1 do
  local id = exp[i]
  redis.call('ZREM', active, id)
  local jk = p .. 'job:' .. id
  local row = rows[i]
  local st, g = row and row[1], row and row[2]
  if not row then
    -- a dead row naming the defect, a string's bytes kept as its data; its group, and so its
    -- slot, unknown
    local kind = redis.call('TYPE', jk)['ok']
    local defect = 'malformed row: a ' .. kind .. ', not a hash'
    local data = nil
    if kind == 'string' then data = redis.call('GET', jk) end
    redis.call('DEL', jk)
    if data then
      redis.call('HSET', jk, 'data', data, 'state', 'dead', 'last_error', defect)
    else
      redis.call('HSET', jk, 'state', 'dead', 'last_error', defect)
    end
    redis.call('ZADD', dead, now, id)
    redis.call('HINCRBY', p .. 'metrics:failed', 'count', 1)
    table.insert(buried, id)
  elseif st then
    if g then -- the slot invariant: the lane job leaves active, its group's slot frees
      local left = (tonumber(redis.call('HGET', groups, 'a:' .. g)) or 0) - 1
      if left <= 0 then redis.call('HDEL', groups, 'a:' .. g) else redis.call('HSET', groups, 'a:' .. g, left) end
    end
    local stalls = (tonumber(row[3]) or 0) + 1
    if stalls >= maxst then
      redis.call('HSET', jk, 'stalled', stalls, 'state', 'dead', 'last_error', 'stalled')
      redis.call('ZADD', dead, now, id)
      redis.call('HINCRBY', p .. 'metrics:failed', 'count', 1)
      table.insert(buried, id)
    else
      redis.call('HSET', jk, 'stalled', stalls, 'state', 'pending')
      if g then
        redis.call('LPUSH', p .. 'lane:' .. g, id)
      else
        redis.call('ZADD', pending, 0, id)
        flat = true
      end
      redis.call('HINCRBY', p .. 'metrics:stalled', 'count', 1)
      table.insert(recovered, id)
    end
    if g and redis.call('HEXISTS', groups, 'r:' .. g) == 0 and redis.call('LLEN', p .. 'lane:' .. g) > 0 then
      -- the ring step for g (eligible: a ready job and a free slot)
      local f = redis.call('HMGET', groups, 'a:' .. g, 'l:' .. g, 'l:~')
      if (tonumber(f[1]) or 0) < (tonumber(f[2]) or tonumber(f[3]) or 1) then
        redis.call('RPUSH', p .. 'ring', g)
        redis.call('HSET', groups, 'r:' .. g, 1)
        if stalls >= maxst then freed = freed + 1 end
      end
    end
  end
end
if flat and redis.call('HEXISTS', groups, 'r:~') == 0 then -- the ring step for the flat set
  redis.call('RPUSH', p .. 'ring', '~')
  redis.call('HSET', groups, 'r:~', 1)
end
local wakes = #recovered + freed
-- one wake per job made claimable, at most 16; none while paused (resume pushes them)
if wakes > 0 and redis.call('EXISTS', p .. 'paused') == 0 then
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
