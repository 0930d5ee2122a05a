-- complete — fenced: only the holder of the current attempts token may settle. The row is kept as
-- completed, with the output, under the queue's retention (or deleted when it keeps none); a lane job frees its slot (ring step, and a
-- wake when that put its group back on the ring). A flat settle pushes no wake. Reads first
-- (emq_settle_finished).
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] the attempts token
-- ARGV[4] record MAXLEN (0 = no completion record)
-- ARGV[5] output: '' = none, else '+' followed by the output bytes
--
-- Replies: 1 = completed, 0 = stale (not the holder), -1 = gone (no row); error EMQARGS.
local active = KEYS[1]
local base, id, token = ARGV[1], ARGV[2], ARGV[3]
local recmax = tonumber(ARGV[4])
if not recmax then return emq_bad_args('complete', 'settle options') end
return emq_settle_finished(base, active, { id, token, ARGV[5] }, 1, 1, 'completed', recmax)[1]
