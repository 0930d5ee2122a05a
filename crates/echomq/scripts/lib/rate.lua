-- lib/rate.lua — Rate limits: GCRA on the store's µs clock. A limit is read once (emq_rate_read),
-- then tested and taken in Lua; the caller writes the TAT it moved back itself.

-- A rate limit (a field rate, rate:~ or rate:<g> of emq:{q}:groups, as set_rate_limit writes it:
-- 'max/per ms/burst') read into its emission interval t = per / max (µs between starts) and its
-- tolerance tol = (burst - 1) × t + slack, slack = min(t / 2, 10 ms), with its TAT (theoretical
-- arrival time, µs; absent or past = now) read from `tat` (a number or nil). GCRA: a start is
-- admitted while tat - now <= tol, and moves tat t later. So at most `burst` starts at once, then
-- one per t, and no window of `per` holds more than max + burst starts; the slack lets a consumer
-- that sleeps until its slot come a little early or late (its timer moves in ms) without losing
-- the slot. nil for no spec, or one no script wrote (no limit).
local function emq_rate_read(spec, tat, now_us)
  if not spec then return nil end
  local max, per, burst = string.match(spec, '^(%d+)/(%d+)/(%d+)$')
  max, per, burst = tonumber(max), tonumber(per), tonumber(burst)
  if not max or max < 1 or per < 1 or burst < 1 then return nil end
  local t = per * 1000 / max
  local slack = t / 2
  if slack > 10000 then slack = 10000 end
  tat = tonumber(tat)
  if not tat or tat < now_us then tat = now_us end
  return { t = t, tol = (burst - 1) * t + slack, tat = tat, moved = false }
end

-- whether limit r (emq_rate_read; nil or false: none) admits a start at now_us
local function emq_rate_admits(r, now_us)
  return not r or r.tat - now_us <= r.tol
end

-- a start under limit r (nil or false: none)
local function emq_rate_take(r)
  if r then
    r.tat = r.tat + r.t
    r.moved = true
  end
end

-- when limit r admits its next start (µs)
local function emq_rate_next(r)
  return r.tat - r.tol
end
