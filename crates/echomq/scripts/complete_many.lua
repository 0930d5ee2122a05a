-- complete_many — complete for a batch in one step (the consumer's group commit): each entry fenced
-- on its own as complete fences it; a repeated entry is stale after its first settle. Reads first
-- (emq_settle_finished).
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] n, 1..1000
-- ARGV[3] record MAXLEN (0 = no completion records)
-- ARGV[4 + 3(i-1) ..] per job i: id, attempts token, output ('' = none, else '+' and the bytes)
--
-- Replies: {code, …} per entry in order: 1 = completed, 0 = stale, -1 = gone; error EMQARGS.
local active = KEYS[1]
local base = ARGV[1]
local n, recmax = tonumber(ARGV[2]), tonumber(ARGV[3])
if not n or n < 1 or n > 1000 or #ARGV ~= 3 + 3 * n then return emq_bad_args('complete_many', 'batch shape') end
if not recmax then return emq_bad_args('complete_many', 'settle options') end
return emq_settle_finished(base, active, ARGV, 4, n, 'completed', recmax)
