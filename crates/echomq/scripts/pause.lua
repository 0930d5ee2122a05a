-- pause — claims give nothing until resume. Jobs keep arriving and waiting.
--
-- KEYS[1] emq:{q}:paused      (string, present while paused)
--
-- Replies: 1.
redis.call('SET', KEYS[1], 1)
return 1
