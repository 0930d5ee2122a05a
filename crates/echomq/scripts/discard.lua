-- discard — fenced: the holder gives up on the job: dead now (metrics failed), the reason as
-- last_error. A lane job frees its slot (the ring step, a wake when that put its group back on the
-- ring); a waited job's id published. Reads first (lib/keys.lua): the row, its group, then the writes.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- KEYS[3] emq:{q}:dead        (zset, score = time of death ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] the attempts token
-- ARGV[4] the reason
-- ARGV[5] record MAXLEN (0 = no completion record)
--
-- Replies: 2 = dead, 0 = stale, -1 = gone; error EMQARGS.
local active, jk = KEYS[1], KEYS[2]
local base, id, token, err, recmax = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if not recmax then return emq_bad_args('discard', 'record') end
local refused, g, r = emq_fence(jk, token, 'free', 'waited')
if refused then return refused end
local lanes, paused = {}, false
local touch = { 'metrics:failed' }
if g then
  emq_lane_read(lanes, base, g)
  paused = emq_paused_read(base)
  touch[#touch + 1] = 'ring'
  emq_wake_touch(touch)
end
if recmax > 0 then touch[#touch + 1] = 'completions' end
emq_touch(base, touch)
-- the membership test is the reply of the ZREM the settle needs anyway (nothing written on 0)
if redis.call('ZREM', active, id) == 0 then return 0 end
local now = emq_now()
emq_bury(base, id, now, err)
if g then emq_wake(base, emq_lane_leave(base, g, lanes[g]), paused) end
emq_count(base, 'failed', 1, now)
emq_record(base, recmax, id, 'dead', emq_used(r[1], r[3]), 'error', err, now)
emq_notify(base, r[4], id)
return 2
