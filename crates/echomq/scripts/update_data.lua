-- update_data — the checkpoint: the holder replaces the row's payload, so a redelivery resumes from
-- it. Fenced like a settle: a holder whose lease lapsed (the job reaped, claimed again) must not
-- overwrite the payload its successor works from. Reads first: the row and the membership, then
-- the one write.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- ARGV[1] id
-- ARGV[2] the attempts token
-- ARGV[3] the new payload
--
-- Replies: 1 = replaced, 0 = stale, -1 = gone.
local active, jk = KEYS[1], KEYS[2]
local id, token, payload = ARGV[1], ARGV[2], ARGV[3]
local refused = emq_fence(jk, token)
if refused then return refused end
if not redis.call('ZSCORE', active, id) then return 0 end
redis.call('HSET', jk, 'data', payload)
return 1
