-- get — one job's row, and its score in the set its state names (lease deadline while active,
-- time of death while dead, due time while scheduled, finished_at while retained). Reads only.
--
-- KEYS[1] emq:{q}:job:<id>    (hash, the row)
-- KEYS[2] emq:{q}:active      (zset)
-- KEYS[3] emq:{q}:scheduled   (zset)
-- KEYS[4] emq:{q}:dead        (zset)
-- KEYS[5] emq:{q}:completed   (zset)
-- KEYS[6] emq:{q}:cancelled   (zset)
-- ARGV[1] id
--
-- Replies: {} = gone; else {HGETALL field/value pairs…, score or '' } (the score last).
local row = redis.call('HGETALL', KEYS[1])
if #row == 0 then return {} end
local state
for i = 1, #row, 2 do
  if row[i] == 'state' then state = row[i + 1] end
end
local set = ({ active = KEYS[2], scheduled = KEYS[3], dead = KEYS[4], completed = KEYS[5], cancelled = KEYS[6] })[state]
local score = ''
if set then score = redis.call('ZSCORE', set, ARGV[1]) or '' end
row[#row + 1] = score
return row
