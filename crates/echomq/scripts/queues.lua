-- queues — every registered queue name (the client adds one after an enqueue that landed replied
-- its registration owed, and removes it after an obliterate). The one key outside any queue's hash
-- tag. Reads only.
--
-- KEYS[1] emq:queues          (set of queue names)
--
-- Replies: {name, …}.
return redis.call('SMEMBERS', KEYS[1])
