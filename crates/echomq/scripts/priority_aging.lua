-- priority_aging — a queue's priority aging as the scripts that rank ready jobs read it (absent:
-- the default, 60000 ms). Reads only.
--
-- KEYS[1] emq:{q}:order       (hash: clock, aging)
-- ARGV[1] the queue base emq:{q}:
--
-- Replies: aging ms (0 = strict).
return emq_order_read(ARGV[1], 1767225600000).aging
