-- complete_cancelled — the `cancel(reason)` verdict: fenced like complete, ending in cancelled (the
-- row kept under the queue's retention with the reason as last_error, or deleted); a lane job frees its slot. Reads first
-- (emq_settle_finished).
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] the attempts token
-- ARGV[4] record MAXLEN (0 = no completion record)
-- ARGV[5] reason: '' = none, else '+' followed by the reason
--
-- Replies: 1 = cancelled, 0 = stale, -1 = gone; error EMQARGS.
local active = KEYS[1]
local base, id, token = ARGV[1], ARGV[2], ARGV[3]
local recmax = tonumber(ARGV[4])
if not recmax then return emq_bad_args('complete_cancelled', 'settle options') end
return emq_settle_finished(base, active, { id, token, ARGV[5] }, 1, 1, 'cancelled', recmax)[1]
