-- list — a page of up to ARGV[3] ids in one state, from a cursor: the position after the job the
-- page before ended on (its score in its set and its id), so a page costs the same however deep it
-- is and however large the set. The next page starts at that job's rank while it is still there at
-- that score, else at the first member of that score, past those of that score not after it (ties
-- in member bytes, as Redis orders them). Scheduled by due time, active by lease deadline, dead,
-- completed and cancelled (each its own set of kept rows) newest first. Pending: the flat set in
-- claim order, then the lanes, one group after another in claim order: the groups hash walked in
-- HSCAN chunks (at most 8 a call; a page may end short with a cursor to go on), the groups of a
-- chunk by name — a group with an a:<g> field met at it, one on the ring only at its r:<g>, so a
-- group is walked once. A page with a next page is full, but for one that read its 8 chunks; the
-- last page has none. Reads only, but for a lane an earlier version wrote as a list, which it
-- turns into the sorted set (emq_lane_len).
--
-- KEYS[1] emq:{q}:pending     (zset)
-- KEYS[2] emq:{q}:scheduled   (zset)
-- KEYS[3] emq:{q}:active      (zset)
-- KEYS[4] emq:{q}:dead        (zset)
-- KEYS[5] emq:{q}:completed   (zset)
-- KEYS[6] emq:{q}:cancelled   (zset)
-- KEYS[7] emq:{q}:groups      (hash)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] state: pending | scheduled | active | dead | completed | cancelled
-- ARGV[3] limit (1..10000)
-- ARGV[4] where the page starts: '' the first page, 'z' after a job of the state's set (for
--         pending, of the flat set), 'l' in the lanes
-- ARGV[5] 'l': the HSCAN cursor of the chunk of the groups hash
-- ARGV[6] 'l': the group the page before ended in ('' = from the chunk's first)
-- ARGV[7] 'z', or 'l' with a group: the score of the job the page before ended on
-- ARGV[8] 'z', or 'l' with a group: that job's id
--
-- Replies: {next: '' (no more), 'z' or 'l'; chunk; group; score; id — the next page's start as
--           ARGV[4..8] take it — then the page's ids}; error EMQARGS.
local base, state, limit, from = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
if not limit or limit < 1 or limit > 10000 then return emq_bad_args('list', 'limit') end
local score = tonumber(ARGV[7])
if (from == 'z' or (from == 'l' and ARGV[6] ~= '')) and not score then
  return emq_bad_args('list', 'cursor')
end

-- whether member a comes before b in member bytes
local function bytes_lt(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- up to n {id, score} pairs of zset k after the member m at score s (the first n when s is nil),
-- in its order (`rev`: highest first)
local function after(k, s, m, n, rev)
  if not s then
    return redis.call(rev and 'ZREVRANGE' or 'ZRANGE', k, 0, n - 1, 'WITHSCORES')
  end
  local r = redis.call(rev and 'ZREVRANK' or 'ZRANK', k, m)
  if r and tonumber(redis.call('ZSCORE', k, m)) == s then
    return redis.call(rev and 'ZREVRANGE' or 'ZRANGE', k, r + 1, r + n, 'WITHSCORES')
  end
  -- m left the set (or moved): from the first member at s, past those at s not after m
  local out, skip = {}, 0
  while true do
    local page
    if rev then
      page = redis.call('ZREVRANGEBYSCORE', k, s, '-inf', 'WITHSCORES', 'LIMIT', skip, n)
    else
      page = redis.call('ZRANGEBYSCORE', k, s, '+inf', 'WITHSCORES', 'LIMIT', skip, n)
    end
    for i = 1, #page, 2 do
      local id = page[i]
      if #out < 2 * n and (tonumber(page[i + 1]) ~= s or (rev and bytes_lt(id, m)) or (not rev and bytes_lt(m, id))) then
        out[#out + 1] = id
        out[#out + 1] = page[i + 1]
      end
    end
    if #out >= 2 * n or #page < 2 * n then return out end
    skip = skip + n
  end
end

-- the page: ids after the five elements of the next start. Each part is read one id past what the
-- page still takes: the page takes up to `limit` ids, and an id read past them says a next page
-- has some (the next start is then the position of the page's last id)
local out, taken = { '', '', '', '', '' }, 0
-- takes the {id, score} pairs of one part (kind, chunk, group as the next start names them);
-- true when an id was read past the page
local function take(pairs_, kind, chunk, g)
  for i = 1, #pairs_, 2 do
    if taken == limit then return true end
    taken = taken + 1
    out[taken + 5] = pairs_[i]
    out[1], out[2], out[3], out[4], out[5] = kind, chunk, g, pairs_[i + 1], pairs_[i]
  end
  return false
end
-- the page, its next start kept only when an id was read past it
local function done(more)
  if not more then out[1] = '' end
  return out
end

local sets = { scheduled = { KEYS[2], false }, active = { KEYS[3], false }, dead = { KEYS[4], true },
  completed = { KEYS[5], true }, cancelled = { KEYS[6], true } }
local set = sets[state]
if set then
  return done(take(after(set[1], from == 'z' and score or nil, ARGV[8], limit + 1, set[2]), 'z', '', ''))
end
if state ~= 'pending' then return emq_bad_args('list', 'state') end

local chunk, g = ARGV[5], ARGV[6]
if from ~= 'l' then
  if take(after(KEYS[1], from == 'z' and score or nil, ARGV[8], limit + 1, false), 'z', '', '') then
    return done(true)
  end
  chunk, g = '0', ''
end
local groups = KEYS[7]
for _ = 1, 8 do
  local scan = redis.call('HSCAN', groups, chunk, 'COUNT', 200)
  local names, seen = {}, {}
  for i = 1, #scan[2], 2 do
    local kind, name = string.sub(scan[2][i], 1, 2), string.sub(scan[2][i], 3)
    if name ~= '~' and not seen[name] and (kind == 'a:'
        or (kind == 'r:' and redis.call('HEXISTS', groups, 'a:' .. name) == 0)) then
      seen[name] = true
      names[#names + 1] = name
    end
  end
  table.sort(names, bytes_lt)
  for _, name in ipairs(names) do
    -- (emq_lane_len turns a lane an earlier version wrote as a list into its sorted set)
    if (g == '' or not bytes_lt(name, g)) and emq_lane_len(base, name) > 0 then
      local want = limit - taken + 1
      local page = after(base .. 'lane:' .. name, name == g and score or nil, ARGV[8], want, false)
      if take(page, 'l', chunk, name) then return done(true) end
    end
  end
  chunk, g = scan[1], ''
  if chunk == '0' then return done(false) end
end
-- the chunks a call reads are read: the next page starts at the next chunk's first group
out[1], out[2], out[3], out[4], out[5] = 'l', chunk, '', '', ''
return out
