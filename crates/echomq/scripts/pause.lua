-- pause — claims give nothing until resume. Jobs keep arriving and waiting. One write, nothing
-- read: a refusal of it leaves the queue as it was.
--
-- KEYS[1] emq:{q}:paused      (string, present while paused)
--
-- Replies: 1.
redis.call('SET', KEYS[1], 1)
return 1
