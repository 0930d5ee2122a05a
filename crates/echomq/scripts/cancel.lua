-- cancel — an operator (or any process) cancels a job. Waiting (pending, in a lane, scheduled): it
-- is cancelled now (its row kept under the queue's retention, or deleted; metrics cancelled; a
-- waited job's id published). Running: the request goes on the
-- row's `cancel` field (its durable copy: a claim of a row carrying it cancels instead of handing
-- out) and is published to the queue's consumers. Dead, completed or cancelled: finished.
-- Reads first (lib/keys.lua): the row; for a waiting job the retained rows it may trim and the keys it
-- only writes, then the writes.
--
-- KEYS[1] emq:{q}:job:<id>    (hash, the row)
-- KEYS[2] emq:{q}:cancel      (pub/sub channel; message = id, a newline, the reason)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] reason: '' = none, else '+' followed by the reason
-- ARGV[4] record MAXLEN (0 = no completion record)
--
-- Replies: 1 = cancelled, 2 = requested, -1 = gone, 0 = finished; error EMQARGS.
local jk = KEYS[1]
local base, id, reason = ARGV[1], ARGV[2], emq_opt(ARGV[3])
local recmax = tonumber(ARGV[4])
if not recmax then return emq_bad_args('cancel', 'settle options') end
local r = redis.call('HMGET', jk, 'state', 'group', 'attempts', 'free', 'waited')
local state, g = r[1], r[2]
if not state then return -1 end
if state == 'active' then
  -- the row was read; the channel is no key (nothing a Cluster migrates)
  redis.call('HSET', jk, 'cancel', reason or '')
  redis.call('PUBLISH', KEYS[2], id .. '\n' .. (reason or ''))
  return 2
end
if state ~= 'pending' and state ~= 'scheduled' then return 0 end
local w = emq_waits_in_read(base, state, g, id)
local touch = { w.key, 'metrics:cancelled' }
if recmax > 0 then touch[#touch + 1] = 'completions' end
emq_touch(base, touch)
local now = emq_now()
local ret = emq_retention_read(base, 'cancelled', 1, now)
emq_unwait(base, id, w)
emq_expire(base, ret)
emq_finish(base, id, 'cancelled', now, ret, 'last_error', reason)
emq_count(base, 'cancelled', 1, now)
emq_record(base, recmax, id, 'cancelled', emq_used(r[3], r[4]), 'error', reason, now)
emq_notify(base, r[5], id)
return 1
