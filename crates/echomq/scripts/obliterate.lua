-- obliterate — deletes every key of the queue, at most ARGV[3] job rows per call: the client loops
-- while the reply says more is left, then `SREM emq:queues q` (and `SADD`s it again when the
-- queue's id counter exists by then: an enqueue landed after the last call). The first call marks
-- the queue (`obliterating`) so enqueues and claims are refused meanwhile. Active jobs refuse it
-- unless forced (then their lane slots are freed as they go, keeping the slot invariant).
--
-- KEYS[1] emq:{q}:active      (zset)
-- KEYS[2] emq:{q}:obliterating (string, the mark)
-- KEYS[3] emq:{q}:pending     (zset)
-- KEYS[4] emq:{q}:scheduled   (zset)
-- KEYS[5] emq:{q}:dead        (zset)
-- KEYS[6] emq:{q}:completed   (zset)
-- KEYS[7] emq:{q}:groups      (hash)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] force (1/0)
-- ARGV[3] limit: rows deleted per call (1..1000)
-- ARGV[4] the HSCAN cursor over the groups hash ('0' on the first call)
--
-- Replies: {removed, next cursor, finished (1/0)}; {-1, active count, 0} when refused (nothing
--          written); error EMQARGS.
local active = KEYS[1]
local base, force, limit, cursor = ARGV[1], ARGV[2] == '1', tonumber(ARGV[3]), ARGV[4]
if not limit or limit < 1 or limit > 1000 then return emq_bad_args('obliterate', 'limit') end
-- held jobs: every member of active
local running = redis.call('ZCARD', active)
if running > 0 and not force then return {-1, running, 0} end
redis.call('SET', KEYS[2], 1)
-- a forced lane job leaves active: its slot freed, then the ring step, because the lanes are found
-- by their a:/r: fields: a group whose last slot this frees while jobs wait in its lane (it was at its
-- limit, off the ring) would otherwise keep no field, and its lane and rows would outlive the queue
local function leave(id)
  local g = redis.call('HGET', base .. 'job:' .. id, 'group')
  if g then emq_release(base, g) end
end
local removed = emq_purge_zset(base, active, limit, leave)
for k = 3, 6 do
  removed = removed + emq_purge_zset(base, KEYS[k], limit - removed, nil)
end
if removed >= limit then return {removed, cursor, 0} end
local lanes, next_cursor, finished = emq_purge_lanes(base, limit - removed, cursor)
removed = removed + lanes
if not finished then return {removed, next_cursor, 0} end
local keys = { base .. 'id', base .. 'ring', base .. 'groups', base .. 'wake', base .. 'paused',
  base .. 'completions' }
for _, event in ipairs({ 'completed', 'cancelled', 'failed', 'retried', 'stalled', 'reaped' }) do
  keys[#keys + 1] = base .. 'metrics:' .. event
end
redis.call('DEL', unpack(keys))
redis.call('DEL', KEYS[2])
return {removed, '0', 1}
