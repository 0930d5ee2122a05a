-- lib/events.lua — What a job's end tells: its id on the finished channel when a caller waits on
-- it, the completion stream (opt-in), the metrics counters and their per-minute history.

-- a job a caller waits on (its row's `waited` mark, set by mark_waited) has finished — completed,
-- cancelled or dead: its id published on emq:{q}:finished. Only a marked row costs this command.
local function emq_notify(base, waited, id)
  if waited then redis.call('PUBLISH', base .. 'finished', id) end
end

-- a completion record, written by the settling script itself (opt-in: recmax > 0 = MAXLEN ~).
-- attempts: the attempts the job has used (emq_used)
local function emq_record(base, recmax, id, status, attempts, field, value, now)
  if recmax <= 0 then return end
  if value then
    redis.call('XADD', base .. 'completions', 'MAXLEN', '~', recmax, '*',
      'id', id, 'status', status, 'attempts', attempts, field, value, 'at', now)
  else
    redis.call('XADD', base .. 'completions', 'MAXLEN', '~', recmax, '*',
      'id', id, 'status', status, 'attempts', attempts, 'at', now)
  end
end

-- a counter of emq:{q}:metrics:<event>; for `completed` and `failed` also this minute's count,
-- the field m<minute> (minute = now ms / 60000) of the same hash, one command per call however
-- many jobs it counts: the first count of a minute also deletes the field of a day before, so
-- the hash keeps about a day of minutes (the history verb reads them)
local function emq_count(base, event, n, now)
  if n <= 0 then return end
  local key = base .. 'metrics:' .. event
  redis.call('HINCRBY', key, 'count', n)
  if event == 'completed' or event == 'failed' then
    local minute = math.floor(now / 60000)
    if redis.call('HINCRBY', key, 'm' .. minute, n) == n then
      redis.call('HDEL', key, 'm' .. (minute - 1440))
    end
  end
end
