-- discard — fenced: the holder gives up on the job: dead now (metrics failed), the reason as
-- last_error. A lane job frees its slot.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- KEYS[3] emq:{q}:dead        (zset, score = time of death ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] the attempts token
-- ARGV[4] the reason
-- ARGV[5] record MAXLEN (0 = no record)
--
-- Replies: 2 = dead, 0 = stale, -1 = gone; error EMQARGS.
local active, jk = KEYS[1], KEYS[2]
local base, id, token, err, recmax = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
if not recmax then return emq_bad_args('discard', 'record') end
local refused, g = emq_fence(jk, token)
if refused then return refused end
if redis.call('ZREM', active, id) == 0 then return 0 end
emq_unmark(base, id, token)
local now = emq_now()
emq_bury(base, id, now, err)
if g then emq_leave_lane(base, g) end
emq_count(base, 'failed', 1)
emq_record(base, recmax, id, 'dead', token, 'error', err, now)
return 2
