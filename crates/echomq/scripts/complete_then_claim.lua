-- complete_then_claim — complete_many, then claim, in one call: a consumer's settle of the jobs
-- that finished and its claim for the slots they free, one script's fixed cost instead of two. The
-- completions land first, each fenced as complete_many fences it (so a lane job's slot is free for
-- the claim behind it); then claim runs whole on its own KEYS and ARGV (emq_claim: the body of
-- claim.lua, which the store wraps in that function ahead of this file). A claim that fails (a key
-- refused, say) leaves the completions landed: its error is the reply's second element.
--
-- KEYS: claim's, KEYS[4] emq:{q}:active the completions' too
-- ARGV[1] c, the count of claim's arguments; ARGV[2 .. 1 + c] claim's ARGV (its ARGV[1], the queue
--         base emq:{q}:, is the completions' too)
-- ARGV[2 + c] n, 1..1000
-- ARGV[3 + c] record MAXLEN (0 = no completion records)
-- ARGV[4 + c + 3(i-1) ..] per job i: id, attempts token, output ('' = none, else '+' and the bytes)
--
-- Replies: {completed, claimed}: complete_many's reply (a code per entry) and claim's (or its error
-- reply). Error EMQARGS, with nothing written.
local c = tonumber(ARGV[1])
if not emq_whole(c, 1) or #ARGV < c + 3 then return emq_bad_args('complete_then_claim', 'claim arguments') end
local n, recmax = tonumber(ARGV[c + 2]), tonumber(ARGV[c + 3])
if not n or n < 1 or n > 1000 or #ARGV ~= c + 3 + 3 * n then
  return emq_bad_args('complete_then_claim', 'batch shape')
end
if not recmax then return emq_bad_args('complete_then_claim', 'settle options') end
local claim_argv = {}
for i = 1, c do claim_argv[i] = ARGV[1 + i] end
local completed = emq_settle_finished(claim_argv[1], KEYS[4], ARGV, c + 4, n, 'completed', recmax)
local ok, claimed = pcall(emq_claim, KEYS, claim_argv)
if not ok then
  -- a command's error is a table (its text in `err`), a script's a string
  if type(claimed) == 'table' and claimed.err then claimed = claimed.err end
  claimed = redis.error_reply(tostring(claimed))
end
return { completed, claimed }
