-- counts — sizes per state and the counters of a queue, in O(1): the lanes' jobs are the count the
-- groups hash keeps (its field lane_jobs, kept by every script that moves a job into or out of a
-- lane). A queue an earlier version wrote keeps none until a job next joins a lane: then its lane
-- jobs are summed over the groups hash in HSCAN chunks — the client loops on the cursor and
-- de-duplicates groups (a group may show an a: and an r: field in different chunks). Reads only.
--
-- KEYS[1] emq:{q}:pending     (zset)
-- KEYS[2] emq:{q}:scheduled   (zset)
-- KEYS[3] emq:{q}:active      (zset)
-- KEYS[4] emq:{q}:dead        (zset)
-- KEYS[5] emq:{q}:paused      (string)
-- KEYS[6] emq:{q}:groups      (hash)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] the HSCAN cursor ('0' on the first call)
--
-- Replies: {pending flat, scheduled, active, dead, paused (1/0), completed, cancelled, failed,
--           retried, stalled, reaped, the oldest pending job's age in ms on the store's clock (-1
--           when the pending tally counts none: lib/rank.lua), next cursor, {group, lane length, …},
--           lane jobs (-1 when the queue keeps no count: then the chunk's lanes are listed, else
--           none and cursor 0), {kind, flat ready jobs of it, …} (each kind named in `kinds` whose
--           set holds jobs, '' for raw jobs: O(kinds))}.
local base, cursor = ARGV[1], ARGV[2]
local reply = {
  redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2]), redis.call('ZCARD', KEYS[3]),
  redis.call('ZCARD', KEYS[4]), redis.call('EXISTS', KEYS[5]),
}
for _, event in ipairs({ 'completed', 'cancelled', 'failed', 'retried', 'stalled', 'reaped' }) do
  reply[#reply + 1] = tonumber(redis.call('HGET', base .. 'metrics:' .. event, 'count')) or 0
end
local oldest = redis.call('ZRANGE', base .. 'pending_since', 0, 0, 'WITHSCORES')
reply[#reply + 1] = oldest[2] and math.max(emq_now() - tonumber(oldest[2]), 0) or -1
local by_kind = {}
for _, kind in ipairs(redis.call('SMEMBERS', base .. 'kinds')) do
  local n = redis.call('ZCARD', base .. 'pending:' .. kind)
  if n > 0 then
    by_kind[#by_kind + 1] = kind
    by_kind[#by_kind + 1] = n
  end
end
local kept = redis.call('HGET', KEYS[6], 'lane_jobs')
if kept then
  reply[#reply + 1] = '0'
  reply[#reply + 1] = {}
  reply[#reply + 1] = tonumber(kept)
  reply[#reply + 1] = by_kind
  return reply
end
local scan = redis.call('HSCAN', KEYS[6], cursor, 'COUNT', 200)
local lanes = {}
for i = 1, #scan[2], 2 do
  local kind, g = string.sub(scan[2][i], 1, 2), string.sub(scan[2][i], 3)
  if (kind == 'a:' or kind == 'r:') and g ~= '~' then
    lanes[#lanes + 1] = g
    lanes[#lanes + 1] = emq_lane_len(base, g)
  end
end
reply[#reply + 1] = scan[1]
reply[#reply + 1] = lanes
reply[#reply + 1] = -1
reply[#reply + 1] = by_kind
return reply
