-- lib/dedup.lua — The dedup sweep: the dedup keys no enqueue could still answer with their holder,
-- let go; the keys still held looked at again later.

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
