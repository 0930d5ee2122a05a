-- rate_limits — a queue's rate limits (emq_rate_read in lib/rate.lua) and their state, as the claim
-- reads them. Reads only; O(the groups hash) to find the groups' own limits.
--
-- KEYS[1] emq:{q}:groups      (hash)
-- KEYS[2] emq:{q}:throttled   (zset)
-- KEYS[3] emq:{q}:tats        (zset)
-- KEYS[4] emq:{q}:tat         (string)
-- ARGV[1] the queue base emq:{q}: (an exact limit's log of starts: `starts`, a group's `starts:<g>`)
--
-- Replies: {queue limit or '', µs until it admits a start (0: now), default or '', throttled
-- groups, µs until the first of them may run (0: none or now), {kind, limit, µs until it admits a
-- start, for every kind with a limit of its own (`kind_rates`)}, then group, limit, µs until it
-- admits a start, for every group with a limit of its own}. A limit is 'max/per ms/burst' as
-- stored (a malformed one as it stands: the caller names it).
local groups, throttled, tats = KEYS[1], KEYS[2], KEYS[3]
local base = ARGV[1]
local now_us = emq_now_us()
local function wait_of(spec, tat, log)
  local r = emq_rate_read(spec, tat, now_us, log)
  if not r then return 0 end
  local w = math.ceil(emq_rate_next(r) - now_us)
  if w < 0 then w = 0 end
  return w
end
local specs = redis.call('HMGET', groups, 'rate', 'rate:~')
local out = { specs[1] or '', 0, specs[2] or '', redis.call('ZCARD', throttled), 0 }
if specs[1] then out[2] = wait_of(specs[1], redis.pcall('GET', KEYS[4]), base .. 'starts') end
local first = redis.call('ZRANGE', throttled, 0, 0, 'WITHSCORES')
if first[2] then
  local w = math.ceil(tonumber(first[2]) - now_us)
  if w > 0 then out[5] = w end
end
local kinds = {}
local kr = redis.call('HGETALL', base .. 'kind_rates')
for i = 1, #kr, 2 do
  kinds[#kinds + 1] = kr[i]
  kinds[#kinds + 1] = kr[i + 1]
  kinds[#kinds + 1] = wait_of(kr[i + 1], redis.pcall('ZSCORE', base .. 'kind_tats', kr[i]), base .. 'kind_starts:' .. kr[i])
end
out[#out + 1] = kinds
local cursor = '0'
repeat
  local page = redis.call('HSCAN', groups, cursor, 'MATCH', 'rate:*', 'COUNT', 1000)
  cursor = page[1]
  local f = page[2]
  for i = 1, #f, 2 do
    local g = string.sub(f[i], 6)
    if g ~= '~' then
      out[#out + 1] = g
      out[#out + 1] = f[i + 1]
      out[#out + 1] = wait_of(f[i + 1], redis.pcall('ZSCORE', tats, g), base .. 'starts:' .. g)
    end
  end
until cursor == '0'
return out
