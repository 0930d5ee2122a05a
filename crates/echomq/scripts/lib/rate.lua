-- lib/rate.lua — Rate limits: GCRA on the store's µs clock, and for an exact-window limit a log of
-- its last starts. A limit is read once (emq_rate_read), then tested and taken in Lua; the caller
-- writes what moved itself (the TAT, and the log by emq_rate_log_write).

-- A rate limit (a field rate, rate:~ or rate:<g> of emq:{q}:groups, as set_rate_limit writes it:
-- 'max/per ms/burst', or 'max/per ms/burst/exact') read into its emission interval t = per / max
-- (µs between starts) and its tolerance tol = (burst - 1) × t, with its TAT (theoretical arrival
-- time, µs; absent or past = now) read from `tat` (a number or nil). GCRA: a start is admitted while
-- tat - now <= tol, and moves tat t later. So at most `burst` starts at once, then one per t: any
-- window of `per` holds at most max + burst - 1 starts (max with the default burst of 1).
-- An exact limit also keeps the last `max` start times (µs, oldest first) in the list `log` (a key
-- name; LLEN read here, so a key of another type fails the script before it writes): a start is
-- admitted only while fewer than `max` of them lie within `per` of now, so no window of `per`
-- holds more than `max`, whatever the burst.
-- nil for no spec, or one no script wrote (no limit).
local function emq_rate_read(spec, tat, now_us, log)
  if not spec then return nil end
  local max, per, burst = string.match(spec, '^(%d+)/(%d+)/(%d+)$')
  local exact = false
  if not max then
    max, per, burst = string.match(spec, '^(%d+)/(%d+)/(%d+)/exact$')
    exact = true
  end
  max, per, burst = tonumber(max), tonumber(per), tonumber(burst)
  if not max or max < 1 or per < 1 or burst < 1 then return nil end
  local t = per * 1000 / max
  tat = tonumber(tat)
  if not tat or tat < now_us then tat = now_us end
  local r = { t = t, tol = (burst - 1) * t, tat = tat, moved = false }
  if exact and log then
    r.log = { key = log, max = max, per = per * 1000, len = redis.call('LLEN', log), taken = 0, at = {},
              now = now_us }
  end
  return r
end

-- the start time the log of limit r must see `per` behind before its next start: the max-th newest
-- with the starts taken here (at now, not yet written) counted, nil when fewer than max are logged
local function emq_rate_log_bar(l)
  local i = l.len - l.max + l.taken
  if i < 0 then return nil end
  if i >= l.len then return l.now end
  local v = l.at[i]
  if not v then
    v = tonumber(redis.call('LRANGE', l.key, i, i)[1]) or 0
    l.at[i] = v
  end
  return v
end

-- whether limit r (emq_rate_read; nil or false: none) admits a start at now_us
local function emq_rate_admits(r, now_us)
  if not r then return true end
  if r.tat - now_us > r.tol then return false end
  if not r.log then return true end
  local bar = emq_rate_log_bar(r.log)
  return not bar or now_us - bar >= r.log.per
end

-- a start under limit r (nil or false: none)
local function emq_rate_take(r)
  if r then
    r.tat = r.tat + r.t
    r.moved = true
    if r.log then r.log.taken = r.log.taken + 1 end
  end
end

-- when limit r admits its next start (µs)
local function emq_rate_next(r)
  local at = r.tat - r.tol
  if r.log then
    local bar = emq_rate_log_bar(r.log)
    if bar and bar + r.log.per > at then at = bar + r.log.per end
  end
  return at
end

-- the starts taken under limit r (nil or false: none) at now_us join its log, which keeps its newest
-- max; true when the log is new (its key created here)
local function emq_rate_log_write(r, now_us)
  if not r or not r.log or r.log.taken == 0 then return false end
  local l, at, starts = r.log, string.format('%d', now_us), {}
  for i = 1, l.taken do starts[i] = at end
  emq_bulk('RPUSH', l.key, starts)
  if l.len + l.taken > l.max then redis.call('LTRIM', l.key, -l.max, -1) end
  return l.len == 0
end
