-- drain (the admin verb, not the consumer's drain leg) — drops ready and scheduled jobs, rows and
-- memberships, at most ARGV[2] per call: the client loops while the reply says more is left. Active
-- and dead jobs stay. Ring members of emptied lanes are dropped by the next claim that meets them.
--
-- KEYS[1] emq:{q}:pending     (zset)
-- KEYS[2] emq:{q}:scheduled   (zset)
-- KEYS[3] emq:{q}:groups      (hash, walked with HSCAN for lanes)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] limit: rows deleted per call (1..1000)
-- ARGV[3] the HSCAN cursor over the groups hash ('0' on the first call)
--
-- Replies: {removed, next cursor, finished (1/0)}; error EMQARGS.
local base, limit, cursor = ARGV[1], tonumber(ARGV[2]), ARGV[3]
if not limit or limit < 1 or limit > 1000 then return emq_bad_args('drain', 'limit') end
local removed = emq_purge_zset(base, KEYS[1], limit, nil)
removed = removed + emq_purge_zset(base, KEYS[2], limit - removed, nil)
if removed >= limit then return {removed, cursor, 0} end
local lanes, next_cursor, finished = emq_purge_lanes(base, limit - removed, cursor)
return {removed + lanes, next_cursor, finished and 1 or 0}
