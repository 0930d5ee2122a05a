-- history — a queue's jobs completed and dead-lettered per minute over its last `minutes`
-- minutes (the current one included), read from the minute counts the counting verbs keep
-- (lib/events.lua emq_count: the field m<minute> of each event's metrics hash, about a day of them).
-- Reads only.
--
-- KEYS[1] emq:{q}:metrics:completed (hash: field m<minute>, minute = Unix ms / 60000)
-- KEYS[2] emq:{q}:metrics:failed    (hash: the same)
-- ARGV[1] minutes, 1 to 1440
--
-- Replies: {first minute (Unix minutes), then `minutes` completed counts, then `minutes` failed
--           counts, each oldest first, 0 for a minute with none}; error EMQARGS.
local n = tonumber(ARGV[1])
if not emq_whole(n, 1) or n > 1440 then return emq_bad_args('history', 'minutes') end
local first = math.floor(emq_now() / 60000) - n + 1
local reply = { first }
for _, key in ipairs({ KEYS[1], KEYS[2] }) do
  -- HMGET in chunks of at most 720 fields (unpack stays small)
  for from = 0, n - 1, 720 do
    local fields = {}
    for i = from, math.min(from + 719, n - 1) do fields[#fields + 1] = 'm' .. (first + i) end
    for _, v in ipairs(redis.call('HMGET', key, unpack(fields))) do
      reply[#reply + 1] = tonumber(v) or 0
    end
  end
end
return reply
