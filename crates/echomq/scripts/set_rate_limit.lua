-- set_rate_limit — a rate limit (emq_rate_read in lib/rate.lua), kept in the groups hash: the queue's
-- own `rate` (every start), the groups' default `rate:~` (each group without its own, each its own
-- budget) or a group's own `rate:<g>`; '' removes it. A change starts the limit afresh: the queue's
-- TAT `tat`, the group's in `tats` (the default's: every group's) is dropped, so its budget is full,
-- and so is an exact limit's log of starts (`starts`, a group's `starts:<g>`; the default's: every
-- group's named in `start_logs`). A kind's own limit is kept apart, in the hash `kind_rates`
-- (kind -> limit; its TAT in `kind_tats`, an exact one's log in `kind_starts:<kind>`): a change
-- drops its TAT and log and wakes the consumers of the kind, a token per ready flat job of it (at
-- most 16).
-- The groups it held back in `throttled` (the group, or for the default every throttled group) go
-- back on the ring's tail, their r: flags kept (a group with an own limit the default does not
-- govern is throttled again at its next pop), with a wake per group, at most 16 — as the queue's
-- change wakes the consumers sleeping until its next admission.
-- Reads first (lib/keys.lua): the ring's length, the throttled groups, then the writes.
--
-- KEYS[1] emq:{q}:groups      (hash)
-- KEYS[2] emq:{q}:throttled   (zset)
-- KEYS[3] emq:{q}:tats        (zset)
-- KEYS[4] emq:{q}:tat         (string)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] the target: 'queue', 'default', 'group' or 'kind'
-- ARGV[3] the group (target 'group') or the kind (target 'kind', '' for raw jobs), else ''
-- ARGV[4] the limit 'max/per ms/burst' (with '/exact' for an exact window), or '' to remove it
--
-- Replies: 1; error EMQARGS.
local groups, throttled, tats = KEYS[1], KEYS[2], KEYS[3]
local base, target, g, spec = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if spec ~= '' and not emq_rate_read(spec, nil, 0) then return emq_bad_args('set_rate_limit', 'limit') end
if target == 'kind' then
  local paused = emq_paused_read(base)
  local ready = redis.call('ZCARD', base .. 'pending:' .. g)
  emq_touch(base, emq_wake_touch({ 'kind_rates', 'kind_tats', 'kind_starts:' .. g, 'groups' }, g))
  if spec == '' then
    redis.call('HDEL', base .. 'kind_rates', g)
  else
    redis.call('HSET', base .. 'kind_rates', g, spec)
  end
  -- the count of kinds with a limit, which every claim reads with the queue's other settings
  redis.call('HSET', groups, 'kind_limits', redis.call('HLEN', base .. 'kind_rates'))
  redis.call('ZREM', base .. 'kind_tats', g)
  redis.call('DEL', base .. 'kind_starts:' .. g)
  emq_wake(base, ready, paused, g)
  return 1
end
local field
if target == 'queue' then field = 'rate'
elseif target == 'default' then field = 'rate:~'
elseif target == 'group' and g ~= '' then field = 'rate:' .. g
else return emq_bad_args('set_rate_limit', 'target') end
local paused = emq_paused_read(base)
local back = {}
if target == 'default' then
  back = redis.call('ZRANGE', throttled, 0, -1)
elseif target == 'group' and redis.call('ZSCORE', throttled, g) then
  back = { g }
end
local ringed = redis.call('LLEN', base .. 'ring')
local logs = {}
if target == 'queue' then
  logs = { 'starts' }
elseif target == 'group' then
  logs = { 'starts:' .. g }
else
  for _, name in ipairs(redis.call('SMEMBERS', base .. 'start_logs')) do logs[#logs + 1] = 'starts:' .. name end
end
emq_touch(base, { 'ring', 'wake', 'wake_any', 'start_logs' })

if spec == '' then redis.call('HDEL', groups, field) else redis.call('HSET', groups, field, spec) end
if target == 'queue' then
  redis.call('DEL', KEYS[4])
elseif target == 'default' then
  redis.call('DEL', tats, throttled)
else
  redis.call('ZREM', tats, g)
  redis.call('ZREM', throttled, g)
end
for i, k in ipairs(logs) do logs[i] = base .. k end
if #logs > 0 then emq_bulk('DEL', nil, logs) end
if target == 'default' then
  redis.call('DEL', base .. 'start_logs')
elseif target == 'group' then
  redis.call('SREM', base .. 'start_logs', g)
end
if #back > 0 then emq_bulk('RPUSH', base .. 'ring', back) end
if target == 'queue' then emq_wake(base, ringed, paused) else emq_wake(base, #back, paused) end
return 1
