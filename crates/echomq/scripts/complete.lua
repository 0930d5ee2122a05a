-- complete — fenced: only the holder of the current attempts token may settle. The row is deleted
-- (or retained as completed, the newest ARGV[4] kept); a lane job frees its slot (ring step, and a
-- wake when that put its group back on the ring). A flat settle pushes no wake.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] the attempts token
-- ARGV[4] retain: newest completed rows kept (0 = delete the row)
-- ARGV[5] record MAXLEN (0 = no completion record)
-- ARGV[6] output: '' = none, else '+' followed by the output bytes
--
-- Replies: 1 = completed, 0 = stale (not the holder), -1 = gone (no row).
local active, jk = KEYS[1], KEYS[2]
local base, id, token = ARGV[1], ARGV[2], ARGV[3]
local keep, recmax, output = tonumber(ARGV[4]), tonumber(ARGV[5]), emq_opt(ARGV[6])
if not keep or not recmax then return emq_bad_args('complete', 'settle options') end
local refused, g = emq_fence(jk, token)
if refused then return refused end
-- the membership test is the reply of the ZREM the settle needs anyway (nothing written on 0)
if redis.call('ZREM', active, id) == 0 then return 0 end
emq_unmark(base, id, token)
local now = 0
if keep > 0 or recmax > 0 then now = emq_now() end
emq_finish(base, id, 'completed', now, keep, 'output', output)
if g then emq_leave_lane(base, g) end
emq_count(base, 'completed', 1)
emq_record(base, recmax, id, 'completed', token, 'output', output, now)
return 1
