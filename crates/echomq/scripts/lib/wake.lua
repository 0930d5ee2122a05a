-- lib/wake.lua — Whether the queue is paused, and the wake tokens a script pushes for the jobs it
-- made claimable (at most 16 kept a list; none while paused: resume pushes them). Three lists: the
-- queue's `wake`, one token per job made claimable, which consumers of every kind park on;
-- `wake:<kind>` (`wake:` for raw jobs), one per flat job of that kind, which consumers of some
-- kinds park on; and `wake_any`, one per job of a kind the script does not know (a lane's head, a
-- schedule's next job, a limit lifted), which consumers of some kinds park on too. A consumer of
-- some kinds is never woken by the flat jobs of other kinds: with one list it would take the
-- token a consumer that runs them waits for.

-- whether the queue is paused: a paused queue makes nothing claimable, so its scripts push no wake
-- (resume pushes them)
local function emq_paused_read(base)
  return redis.call('EXISTS', base .. 'paused') == 1
end

-- the wake lists a script pushing tokens for flat jobs of `kind` reaches before its first write,
-- added to a list of suffixes for emq_touch (`wake` and `wake_any` go in every such list)
local function emq_wake_touch(touch, kind)
  touch[#touch + 1] = 'wake'
  touch[#touch + 1] = 'wake_any'
  if kind then touch[#touch + 1] = 'wake:' .. kind end
  return touch
end

-- n tokens (at most 16) pushed onto the list `key`, then the list trimmed to its newest 16
local function emq_push_tokens(key, n)
  if n <= 0 then return end
  if n > 16 then n = 16 end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  if redis.call('RPUSH', key, unpack(tokens)) > 16 then
    redis.call('LTRIM', key, '-16', '-1')
  end
end

-- the wakes a script gathers, pushed once (emq_wakes_push): `any` counts the jobs of a kind it
-- does not know, kinds[k] the flat jobs of kind k ('' for raw jobs), in the order first met
local function emq_wakes()
  return { any = 0, kinds = {}, order = {} }
end

-- n jobs made claimable, of `kind` (nil: a kind the script does not know)
local function emq_wakes_add(w, kind, n)
  if n <= 0 then return end
  if kind == nil then
    w.any = w.any + n
    return
  end
  if not w.kinds[kind] then
    w.kinds[kind] = 0
    w.order[#w.order + 1] = kind
  end
  w.kinds[kind] = w.kinds[kind] + n
end

-- the gathered wakes pushed: each kind's onto wake:<kind>, the unknown onto wake_any, all of them
-- onto wake; none while paused (`paused` as emq_paused_read read it before the first write, the
-- lists reached then: emq_wake_touch)
local function emq_wakes_push(base, w, paused)
  if paused then return end
  local total = w.any
  emq_push_tokens(base .. 'wake_any', w.any)
  for _, k in ipairs(w.order) do
    emq_push_tokens(base .. 'wake:' .. k, w.kinds[k])
    total = total + w.kinds[k]
  end
  emq_push_tokens(base .. 'wake', total)
end

-- one wake token per job made claimable (n of them, of `kind`, nil when the script does not know
-- it), as emq_wakes_push pushes them
local function emq_wake(base, n, paused, kind)
  local w = emq_wakes()
  emq_wakes_add(w, kind, n)
  emq_wakes_push(base, w, paused)
end

-- the earliest due time a parked consumer knows of: the head of `scheduled` (its due ms, nil when
-- none), read before the first write by a script that schedules jobs (emq_due_wake)
local function emq_due_read(base)
  return tonumber(redis.call('ZRANGE', base .. 'scheduled', 0, 0, 'WITHSCORES')[2])
end

-- a job scheduled at `due` (ms) ahead of the head read (emq_due_read): a parked consumer's park
-- ends at the head its last promote saw, and would end past this job's due time; one token on
-- `wake` and one on `wake_any` end a park of each sort, whose next promote sees the new head.
-- None while paused (resume wakes them); the lists reached before the first write (emq_wake_touch)
local function emq_due_wake(base, head, due, paused)
  if paused or (head and head <= due) then return end
  emq_push_tokens(base .. 'wake', 1)
  emq_push_tokens(base .. 'wake_any', 1)
end
