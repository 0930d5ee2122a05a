-- consumers — the live consumers of a queue: the entries of the registry not past their deadline on
-- the store's clock, by id, at most 1000. Reads only (register_consumer deletes lapsed entries).
--
-- KEYS[1] emq:{q}:consumers        (zset: id → deadline ms)
-- KEYS[2] emq:{q}:consumer_entries (hash: id → entry text)
--
-- Replies: {id, deadline, entry text ('' when missing), …}.
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. emq_now(), '+inf', 'WITHSCORES', 'LIMIT', 0, 1000)
if #live == 0 then return {} end
local ids = {}
for i = 1, #live, 2 do ids[#ids + 1] = live[i] end
local texts = redis.call('HMGET', KEYS[2], unpack(ids))
local reply = {}
for k, id in ipairs(ids) do
  reply[#reply + 1] = id
  reply[#reply + 1] = live[2 * k]
  reply[#reply + 1] = texts[k] or ''
end
return reply
