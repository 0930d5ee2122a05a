-- register_consumer — a consumer's entry in the registry of live consumers, written at most once per
-- beat: its id scored by its deadline (the store's time plus its ttl) in `consumers`, its entry
-- text in `consumer_entries`. A consumer's first registration also deletes up to ten entries of
-- consumers that died without unregistering (past their deadline): every start clears more dead
-- entries than it adds, so the registry stays about the size of the live consumers, and a beat
-- costs no more than its two writes. The registry is apart from the wake list and the channels: a
-- registration wakes no parked consumer.
--
-- KEYS[1] emq:{q}:consumers        (zset: id → deadline ms)
-- KEYS[2] emq:{q}:consumer_entries (hash: id → entry text)
-- ARGV[1] the consumer's id
-- ARGV[2] its entry text
-- ARGV[3] its ttl in ms (1 .. 86400000)
-- ARGV[4] '1' on its first registration (lapsed entries deleted), else '0'
--
-- Replies: the deadline written (ms). Error EMQARGS.
local ttl = tonumber(ARGV[3])
if not emq_whole(ttl, 1) or ttl > 86400000 then return emq_bad_args('register_consumer', 'ttl') end
local now = emq_now()
if ARGV[4] == '1' then
  local lapsed = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 10)
  if #lapsed > 0 then
    redis.call('ZREM', KEYS[1], unpack(lapsed))
    redis.call('HDEL', KEYS[2], unpack(lapsed))
  end
end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
return now + ttl
