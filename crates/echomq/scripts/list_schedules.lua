-- list_schedules — every schedule of the queue with its definition and state, by name.
--
-- KEYS[1] emq:{q}:schedules (zset)
-- ARGV[1] the queue base emq:{q}:
--
-- Replies: {name, {field, value, …}, …}.
local out = {}
for _, name in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  out[#out + 1] = name
  out[#out + 1] = redis.call('HGETALL', ARGV[1] .. 'schedule:' .. name)
end
return out
