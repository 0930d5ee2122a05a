-- set_retention — what a queue keeps of its finished jobs, read by every script that finishes one
-- (emq_retention_of in lib/retention.lua): the newest `keep` rows (0 = none: a row is deleted as it
-- finishes), each for about `age` ms, an output up to `cap` bytes. One write.
--
-- KEYS[1] emq:{q}:retention   (hash: keep, age, cap)
-- ARGV[1] keep (>= 0)
-- ARGV[2] age ms (>= 1)
-- ARGV[3] cap bytes (>= 0)
--
-- Replies: 1; error EMQARGS.
local keep, age, cap = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
if not emq_whole(keep, 0) or not emq_whole(age, 1) or not emq_whole(cap, 0) then
  return emq_bad_args('set_retention', 'keep, age or cap')
end
redis.call('HSET', KEYS[1], 'keep', keep, 'age', age, 'cap', cap)
return 1
