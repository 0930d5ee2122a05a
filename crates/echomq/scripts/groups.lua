-- groups — a page of a queue's groups: each group with waiting or running jobs or a limit of its
-- own (a field a:<g>, r:<g> or l:<g> of the groups hash), its waiting jobs (its lane's length),
-- its running jobs and its own limit. One HSCAN chunk of the groups hash a call: the client
-- follows the cursor, and de-duplicates groups (a group's fields may come in different chunks).
-- Reads only (a lane an earlier version wrote as a list is counted with LLEN, not converted).
--
-- KEYS[1] emq:{q}:groups (hash)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] the HSCAN cursor ('0' on the first call)
--
-- Replies: {next cursor ('0' at the end), the queue default limit ('' = 1), then per group of the
--           chunk: name, waiting, active, own limit ('' = none)}.
local base, cursor = ARGV[1], ARGV[2]
local scan = redis.call('HSCAN', KEYS[1], cursor, 'COUNT', 200)
local reply = { scan[1], redis.call('HGET', KEYS[1], 'l:~') or '' }
local seen = {}
for i = 1, #scan[2], 2 do
  local kind, g = string.sub(scan[2][i], 1, 2), string.sub(scan[2][i], 3)
  if (kind == 'a:' or kind == 'r:' or kind == 'l:') and g ~= '~' and not seen[g] then
    seen[g] = true
    local lane = base .. 'lane:' .. g
    local waiting = redis.pcall('ZCARD', lane)
    if type(waiting) ~= 'number' then waiting = redis.call('LLEN', lane) end
    local f = redis.call('HMGET', KEYS[1], 'a:' .. g, 'l:' .. g)
    reply[#reply + 1] = g
    reply[#reply + 1] = waiting
    reply[#reply + 1] = tonumber(f[1]) or 0
    reply[#reply + 1] = f[2] or ''
  end
end
return reply
