-- lib/keys.lua — Keys reached and bulk commands. Every key a helper builds is the queue base
-- ARGV[1] = 'emq:{q}:' plus a suffix listed in keyspace.rs.
--
-- Reads first. A script reads everything it will read before its first write, and reaches the keys
-- it only writes with emq_touch there too (all but the key of its first write: refused, that write
-- leaves the queue as it was as well). Redis keeps the writes of a script that fails half-way, and
-- on a Redis Cluster any key of a slot being migrated can be refused at any call: a refusal (or any
-- error) before the first write leaves the queue as it was, and once every key the script touches
-- has answered, none of its later calls can be refused. A loop over many jobs reads them all, then
-- writes them all. Helpers named *_read only read and come before the first write; the others
-- write.

-- reaches keys the script writes without reading them (suffixes of the queue base), before its
-- first write: EXISTS of at most 1000 keys at a time, refused whole when any of them is not served
-- here
local function emq_touch(base, suffixes)
  for i = 1, #suffixes, 1000 do
    local keys = {}
    for j = i, math.min(i + 999, #suffixes) do keys[#keys + 1] = base .. suffixes[j] end
    redis.call('EXISTS', unpack(keys))
  end
end

-- the rows of these ids (suffixes job:<id>) added to a list of suffixes for emq_touch
local function emq_rows_of(ids, into)
  for _, id in ipairs(ids) do into[#into + 1] = 'job:' .. id end
  return into
end

-- ZADD/ZREM/RPUSH/HSET/HDEL (on `key`) or DEL/EXISTS (key = nil) with many arguments, unpacked in
-- chunks of at most 1000 (an even size, so pairs never split)
local function emq_bulk(cmd, key, args)
  for i = 1, #args, 1000 do
    local j = i + 999
    if j > #args then j = #args end
    if key then
      redis.call(cmd, key, unpack(args, i, j))
    else
      redis.call(cmd, unpack(args, i, j))
    end
  end
end

-- these job rows deleted (the rows reached before the first write: emq_touch of emq_rows_of)
local function emq_del_rows(base, ids)
  local rows = {}
  for i, id in ipairs(ids) do rows[i] = base .. 'job:' .. id end
  emq_bulk('DEL', nil, rows)
end
