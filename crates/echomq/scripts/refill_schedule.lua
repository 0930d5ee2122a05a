-- refill_schedule — more slots of a schedule, computed by a consumer that a promote asked
-- (promote's reply names the schedule, its version and cursor): accepted only while the schedule
-- still has that version and cursor and is not paused, so a refill computed from a definition an
-- upsert has since replaced, or a second consumer's refill of the same request, changes nothing.
-- The slots after the cursor are appended, the missed slots the refill only counted (`omitted`)
-- join the backlog, the cursor moves to the last slot given, and the due entry to the first slot
-- held.
--
-- KEYS[1] emq:{q}:schedule:<name> (hash)
-- KEYS[2] emq:{q}:schedule_due   (zset)
-- ARGV[1] the schedule's name
-- ARGV[2] the version asked under
-- ARGV[3] the cursor asked from
-- ARGV[4] omitted: missed slots counted, not listed
-- ARGV[5]… the slots, Unix ms, ascending, after the cursor
--
-- Replies: 1 written, 0 refused (another version or cursor, paused, or no such schedule); error
--          EMQARGS.
local key = KEYS[1]
local name, version, cursor, omitted = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
if not emq_whole(omitted, 0) then return emq_bad_args('refill_schedule', 'omitted') end
if not emq_whole(tonumber(cursor), 0) then return emq_bad_args('refill_schedule', 'cursor') end
for i = 5, #ARGV do
  if not emq_whole(tonumber(ARGV[i]), 0) or tonumber(ARGV[i]) <= tonumber(cursor) then
    return emq_bad_args('refill_schedule', 'slot')
  end
end
local f = redis.call('HMGET', key, 'version', 'cursor', 'paused', 'slots', 'backlog')
if f[1] ~= version or f[2] ~= cursor or f[3] == '1' then return 0 end
-- the due set is only written: reached before the first write
redis.call('EXISTS', KEYS[2])
local slots = f[4] or ''
for i = 5, #ARGV do
  if slots == '' then slots = ARGV[i] else slots = slots .. ',' .. ARGV[i] end
end
local last = ARGV[#ARGV]
if #ARGV < 5 then last = cursor end
redis.call('HSET', key, 'slots', slots, 'cursor', last, 'backlog', (tonumber(f[5]) or 0) + omitted)
local first = string.match(slots, '^[^,]+')
if first then redis.call('ZADD', KEYS[2], first, name) end
return 1
