-- drain (the admin verb, not the consumer's drain leg) — drops ready and scheduled jobs, rows and
-- memberships, at most ARGV[2] per call: the client loops while the reply says more is left. Active
-- and dead jobs stay. Ring members of emptied lanes are dropped by the next claim that meets them.
-- The call that empties `pending` deletes the flat sets by kind too (each kind named in `kinds`).
-- Reads first (lib/keys.lua): the heads of pending and scheduled, then (budget left) a page of the
-- groups hash and the heads of its lanes, every row they hold (EXISTS: the rows are only
-- deleted) and the priority of each ready job (with its rank, read with the heads, it leaves the
-- pending tally), then the writes. A call that deletes rows tells the queue's waiters to look at
-- their jobs again (`*` on emq:{q}:finished): it reads no row, so it sees no waited mark.
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
local ranks = {}
local pend = emq_zset_head_read(KEYS[1], limit, ranks)
local sched = emq_zset_head_read(KEYS[2], limit - #pend)
local removed = #pend + #sched
local rows = emq_rows_of(sched, emq_rows_of(pend, {}))
local cuts, lanes, next_cursor, finished = {}, 0, cursor, false
if removed < limit then
  local fields, scanned = emq_groups_page_read(base, cursor)
  local walked
  cuts, lanes, walked = emq_lanes_read(base, limit - removed, fields)
  if walked then next_cursor, finished = scanned, scanned == '0' end
  for _, c in ipairs(cuts) do emq_rows_of(c.ids, rows) end
end
-- the flat sets by kind, deleted by the call that takes the last of pending
local by_kind = {}
if #pend < limit then
  for _, kind in ipairs(redis.call('SMEMBERS', base .. 'kinds')) do
    by_kind[#by_kind + 1] = 'pending:' .. kind
  end
end
local left = emq_tally_new()
emq_tally_leaving_read(base, left, pend, ranks)
for _, c in ipairs(cuts) do emq_tally_leaving_read(base, left, c.ids, c.ranks) end
local touch = emq_tally_touch({})
for _, key in ipairs(by_kind) do touch[#touch + 1] = key end
for _, key in ipairs(rows) do touch[#touch + 1] = key end
emq_touch(base, touch)
if #rows > 0 then redis.call('PUBLISH', base .. 'finished', '*') end

emq_zset_purge(base, KEYS[1], pend)
for i, key in ipairs(by_kind) do by_kind[i] = base .. key end
emq_bulk('DEL', nil, by_kind)
emq_zset_purge(base, KEYS[2], sched)
emq_tally_write(base, left)
if removed >= limit then return {removed, cursor, 0} end
emq_lanes_cut(base, cuts)
return {removed + lanes, next_cursor, finished and 1 or 0}
