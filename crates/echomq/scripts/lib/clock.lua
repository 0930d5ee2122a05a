-- lib/clock.lua — The store's clock (Redis TIME), in ms and in µs; reads only.

-- the clock as one script call reads it: TIME once at most, so that every step of a call (a
-- settle and the claim behind it) sees one instant
local emq_clock = {}

-- the store's time in µs (the clock of the rate limits)
local function emq_now_us()
  if not emq_clock[1] then
    local t = redis.call('TIME')
    emq_clock[1] = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return emq_clock[1]
end

-- the store's clock, in ms: emq_now_us's whole ms
local function emq_now()
  return math.floor(emq_now_us() / 1000)
end
