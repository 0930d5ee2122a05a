-- set_priority_aging — how long a lower priority waits behind a higher one, read by every script
-- that makes a job ready (emq_order_read in lib/rank.lua): a job of priority p goes before every
-- priority-0 job made ready more than p × aging after it; 0 = strict (no job runs while a more
-- urgent one waits). Ranks already given keep their place: the new aging ranks the jobs made
-- ready from now on. One write.
--
-- KEYS[1] emq:{q}:order       (hash: clock, aging)
-- ARGV[1] aging ms (0 = strict, else up to 365 days)
--
-- Replies: 1; error EMQARGS.
local aging = tonumber(ARGV[1])
if not emq_whole(aging, 0) or aging > 31536000000 then return emq_bad_args('set_priority_aging', 'aging') end
redis.call('HSET', KEYS[1], 'aging', aging)
return 1
