-- retention — a queue's retention as the finishing scripts read it: its own fields, each absent one
-- at its default (emq_retention_of). Reads only.
--
-- KEYS[1] emq:{q}:retention   (hash: keep, age, cap)
-- ARGV[1] the queue base emq:{q}:
--
-- Replies: {keep, age ms, cap bytes}.
local ret = emq_retention_of(ARGV[1])
return { ret.keep, ret.age, ret.cap }
