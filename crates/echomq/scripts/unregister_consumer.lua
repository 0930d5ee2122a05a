-- unregister_consumer — a stopping consumer's entry removed from the registry of live consumers.
--
-- KEYS[1] emq:{q}:consumers        (zset: id → deadline ms)
-- KEYS[2] emq:{q}:consumer_entries (hash: id → entry text)
-- ARGV[1] the consumer's id
--
-- Replies: 1 when there was an entry, else 0.
local removed = redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return removed
