-- mark_waited — a caller starts waiting on a job (JobHandle::wait). A job still to finish (pending,
-- scheduled, active) gets the `waited` mark on its row: the script that finishes it — complete,
-- complete_many, complete_cancelled, cancel, discard, retry, claim, sweep_stalled, remove (and reap
-- and promote, which bury a malformed row) — reads
-- the mark with the fields it reads anyway and publishes the id on emq:{q}:finished, so a job
-- nobody waits on costs no command. A finished job (completed, cancelled, dead) is answered with
-- its row, as get answers; a job with no row with the queue's id sequence (a generated id at or
-- below it was pushed, so its row is past retention or removed). Subscribe to the channel first:
-- a finish after this script then reaches the caller.
--
-- KEYS[1] emq:{q}:job:<id>    (hash, the row)
-- KEYS[2] emq:{q}:dead        (zset)
-- KEYS[3] emq:{q}:completed   (zset)
-- KEYS[4] emq:{q}:id          (string, the id sequence)
-- KEYS[5] emq:{q}:cancelled   (zset)
-- ARGV[1] id
--
-- Replies: {'waiting'}; {'gone', sequence}; {'finished', HGETALL field/value pairs…, score}.
local jk = KEYS[1]
local row = redis.call('HGETALL', jk)
if #row == 0 then return { 'gone', redis.call('GET', KEYS[4]) or '0' } end
local state
for i = 1, #row, 2 do
  if row[i] == 'state' then state = row[i + 1] end
end
local set = ({ dead = KEYS[2], completed = KEYS[3], cancelled = KEYS[5] })[state]
if not set then
  redis.call('HSET', jk, 'waited', '1')
  return { 'waiting' }
end
local out = { 'finished' }
for i = 1, #row do out[i + 1] = row[i] end
out[#out + 1] = redis.call('ZSCORE', set, ARGV[1]) or ''
return out
