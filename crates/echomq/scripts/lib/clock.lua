-- lib/clock.lua — The store's clock (Redis TIME), in ms and in µs; reads only.

-- the store's clock, in ms
local function emq_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- the store's time in µs (the clock of the rate limits); emq_now is its whole ms
local function emq_now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end
