-- complete_cancelled — the `cancel(reason)` verdict: fenced like complete, ending in cancelled (the
-- row deleted, or retained with the reason as last_error); a lane job frees its slot.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] the attempts token
-- ARGV[4] retain: newest finished rows kept (0 = delete the row)
-- ARGV[5] record MAXLEN (0 = no completion record)
-- ARGV[6] reason: '' = none, else '+' followed by the reason
--
-- Replies: 1 = cancelled, 0 = stale, -1 = gone.
local active, jk = KEYS[1], KEYS[2]
local base, id, token = ARGV[1], ARGV[2], ARGV[3]
local keep, recmax, reason = tonumber(ARGV[4]), tonumber(ARGV[5]), emq_opt(ARGV[6])
if not keep or not recmax then return emq_bad_args('complete_cancelled', 'settle options') end
local refused, g = emq_fence(jk, token)
if refused then return refused end
if redis.call('ZREM', active, id) == 0 then return 0 end
emq_unmark(base, id, token)
local now = emq_now()
emq_finish(base, id, 'cancelled', now, keep, 'last_error', reason)
if g then emq_leave_lane(base, g) end
emq_count(base, 'cancelled', 1)
emq_record(base, recmax, id, 'cancelled', token, 'error', reason, now)
return 1
