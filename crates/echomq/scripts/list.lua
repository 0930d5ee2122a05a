-- list — up to ARGV[4] ids in one state from ARGV[3]: pending = the flat set in claim order, then
-- each lane on the ring in ring order (at most the first 1000 members), then the lanes of the groups
-- a rate limit holds back, by admission (at most the first 1000), then the lanes of groups off
-- the ring — at their limit, their jobs wait all the same — by group name (those among the first
-- ~10,000 fields of the groups hash, read only when the page reaches them); scheduled by due time;
-- active by lease deadline; dead newest first; completed / cancelled = retained rows newest first
-- (filtered by state among at most 10,000 retained rows). Reads only.
--
-- KEYS[1] emq:{q}:pending     (zset)
-- KEYS[2] emq:{q}:scheduled   (zset)
-- KEYS[3] emq:{q}:active      (zset)
-- KEYS[4] emq:{q}:dead        (zset)
-- KEYS[5] emq:{q}:completed   (zset)
-- KEYS[6] emq:{q}:ring        (list)
-- KEYS[7] emq:{q}:throttled   (zset)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] state: pending | scheduled | active | dead | completed | cancelled
-- ARGV[3] offset (>= 0)
-- ARGV[4] limit (1..10000)
--
-- Replies: {id, …}; error EMQARGS.
local base, state, offset, limit = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if not offset or offset < 0 or not limit or limit < 1 or limit > 10000 then return emq_bad_args('list', 'offset or limit') end
local last = offset + limit - 1
if state == 'scheduled' then return redis.call('ZRANGE', KEYS[2], offset, last) end
-- active by rank (a score range would walk the offset)
if state == 'active' then return redis.call('ZRANGE', KEYS[3], offset, last) end
if state == 'dead' then return redis.call('ZREVRANGE', KEYS[4], offset, last) end
if state == 'completed' or state == 'cancelled' then
  local out, skipped = {}, 0
  for _, id in ipairs(redis.call('ZREVRANGE', KEYS[5], 0, 9999)) do
    if redis.call('HGET', base .. 'job:' .. id, 'state') == state then
      if skipped < offset then skipped = skipped + 1 else out[#out + 1] = id end
      if #out >= limit then break end
    end
  end
  return out
end
if state ~= 'pending' then return emq_bad_args('list', 'state') end
local out = redis.call('ZRANGE', KEYS[1], offset, last)
local skip = offset - redis.call('ZCARD', KEYS[1])
if skip < 0 then skip = 0 end
-- the page continues through lane g (skipping what the offset still skips)
local function walk(g)
  local lane = base .. 'lane:' .. g
  local len = emq_lane_len(base, g)
  if skip >= len then
    skip = skip - len
  else
    for _, id in ipairs(redis.call('ZRANGE', lane, skip, skip + limit - #out - 1)) do out[#out + 1] = id end
    skip = 0
  end
end
for _, g in ipairs(redis.call('LRANGE', KEYS[6], 0, 999)) do
  if #out >= limit then return out end
  if g ~= '~' then walk(g) end
end
for _, g in ipairs(redis.call('ZRANGE', KEYS[7], 0, 999)) do
  if #out >= limit then return out end
  walk(g)
end
if #out >= limit then return out end
-- groups off the ring holding a slot (a:<g> without r:<g>): a non-empty lane off the ring is always
-- one of these (a group leaves the ring with jobs waiting only at its limit)
local groups = base .. 'groups'
local off, seen, cursor = {}, {}, '0'
for _ = 1, 10 do
  local scan = redis.call('HSCAN', groups, cursor, 'COUNT', 1000)
  cursor = scan[1]
  for i = 1, #scan[2], 2 do
    local f = scan[2][i]
    if string.sub(f, 1, 2) == 'a:' then
      local g = string.sub(f, 3)
      if not seen[g] and redis.call('HEXISTS', groups, 'r:' .. g) == 0 then
        seen[g] = true
        off[#off + 1] = g
      end
    end
  end
  if cursor == '0' then break end
end
table.sort(off)
for _, g in ipairs(off) do
  if #out >= limit then break end
  walk(g)
end
return out
