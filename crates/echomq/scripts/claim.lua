-- claim — up to n jobs off the ring, each under a lease on the store's clock (DESIGN §3).
-- Pop the head member; if eligible take one job from it (the flat set '~': its lowest score; a
-- group: its lane's head, a:<g> + 1) and push it back at the tail while still eligible, else clear
-- its r: flag; a member that gives nothing is dropped. When '~' is the last member, the rest comes
-- from one range of pending. A paused (or obliterating) queue claims nothing.
-- A job met with attempts >= its max_attempts (its own, else ARGV[4]) goes dead ("lease expired on
-- the last attempt"); a row carrying `cancel` goes to cancelled; a malformed row goes dead naming
-- its defect (a key of another type at the row's key too: emq_bury_foreign); a missing row is
-- dropped. None of these fails the batch: rows are read by pcall.
--
-- KEYS[1] emq:{q}:ring        (list of ring members)
-- KEYS[2] emq:{q}:groups      (hash: a:<g> l:<g> r:<g> l:~ r:~)
-- KEYS[3] emq:{q}:pending     (zset, score = sequence)
-- KEYS[4] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[5] emq:{q}:paused      (string)
-- KEYS[6] emq:{q}:obliterating (string)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] n, 1..1000
-- ARGV[3] lease ms (> 0)
-- ARGV[4] default max_attempts (>= 1)
-- ARGV[5] retain: newest rows kept for claim-time cancellations (0 = delete)
-- ARGV[6] record MAXLEN (0 = no completion records)
-- ARGV[7] max bytes: no job is taken once the payloads handed out reach this (>= 1; the first
--         job is always taken, so a reply passes it by one payload at most)
--
-- A job handed out past its first attempt joins emq:{q}:reclaimed (set; see complete_many).
--
-- Replies: {id, payload, …, more}: two elements per job (at most n jobs), in claim order, then
-- `more`: an empty array when every job handed out is a flat job on its first attempt (a fresh
-- backlog: half the reply elements, each a conversion and a copy), else {attempts, group ('' =
-- flat), …} for every job in order. Nothing handed out: {}. Error EMQARGS.
local ring, groups, pending, active = KEYS[1], KEYS[2], KEYS[3], KEYS[4]
local base = ARGV[1]
local n, lease, maxdef = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local keep, recmax, maxbytes = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
if not n or n < 1 or n > 1000 then return emq_bad_args('claim', 'n') end
-- a finite lease only (tonumber takes 'inf' and 'nan'): a deadline at +inf would tie with the reserved
-- member of `active`, out of every count and recovery range
if not lease or lease <= 0 or lease >= 2^53 or lease ~= lease then return emq_bad_args('claim', 'lease') end
if not emq_whole(maxdef, 1) then return emq_bad_args('claim', 'max_attempts') end
if not keep or not recmax then return emq_bad_args('claim', 'settle options') end
if not maxbytes or maxbytes < 1 then return emq_bad_args('claim', 'max bytes') end
if redis.call('EXISTS', KEYS[5], KEYS[6]) > 0 then return {} end
-- the idle path (a parked consumer's beat) ends here: an empty ring has nothing to give
local ring_len = redis.call('LLEN', ring)
if ring_len == 0 then return {} end

local now = emq_now()
-- as text once: every leased member's score would otherwise be formatted anew (a printf each)
local deadline = tostring(now + lease)
-- out: id, payload per job; more: attempts, group per job, kept from the first job that is not a
-- fresh flat one on (fresh: whether every job so far is)
local out, more = {}, {}
local nout = 0
local fresh = true
local got, failed, cancelled, bytes = 0, 0, 0, 0
-- the jobs handed out again (attempts past 1): into `reclaimed` (emq_unmark)
local again = {}
-- attempts counts as text: the common small ones without a number-to-text printf per job
local ATTEMPTS = { '1', '2', '3', '4', '5', '6', '7', '8', '9', '10' }
-- read: every read of a row, so that a key of another type there is buried, not raised half-way
local call, read, jobs = redis.call, redis.pcall, base .. 'job:'

-- one popped job: hand it out, or settle it here. True when handed out. jk: the row's key, when
-- the caller built it already.
local function take(id, g, jk)
  jk = jk or jobs .. id
  -- HGETALL: a waiting row holds only the fields that apply, so this reads 2 where HMGET of every
  -- field the guard needs would read 5 (most absent)
  local all = read('HGETALL', jk)
  if emq_foreign(all) then
    local defect = emq_bury_foreign(base, id, now)
    emq_record(base, recmax, id, 'dead', nil, 'error', defect, now)
    failed = failed + 1
    return false
  end
  if #all == 0 then return false end -- a missing row: dropped
  -- the fields picked out as they come (no table built per job; Lua compares interned strings
  -- by address)
  local data, state, attempts, maxattempts, cancel
  for i = 1, #all, 2 do
    local k = all[i]
    if k == 'data' then data = all[i + 1]
    elseif k == 'state' then state = all[i + 1]
    elseif k == 'attempts' then attempts = all[i + 1]
    elseif k == 'max_attempts' then maxattempts = all[i + 1]
    elseif k == 'cancel' then cancel = all[i + 1]
    end
  end
  -- a row never claimed and with no budget of its own (the bulk of a backlog) has no number to
  -- parse: tonumber of a text and two checks cost about a tenth of a claimed job
  local att, maxa, defect = 0, maxdef, nil
  if not data then defect = 'malformed row: no data'
  elseif state ~= 'pending' then defect = 'malformed row: state ' .. tostring(state) .. ' in a ready set'
  elseif attempts or maxattempts then
    att, maxa = tonumber(attempts or '0'), tonumber(maxattempts or maxdef)
    if not emq_whole(att, 0) then defect = 'malformed row: attempts ' .. attempts
    elseif not emq_whole(maxa, 1) then defect = 'malformed row: max_attempts ' .. tostring(maxattempts)
    end
  end
  if not defect and cancel then
    emq_finish(base, id, 'cancelled', now, keep, 'last_error', cancel)
    emq_record(base, recmax, id, 'cancelled', attempts, 'error', cancel, now)
    cancelled = cancelled + 1
    return false
  end
  if not defect and att >= maxa then defect = 'lease expired on the last attempt' end
  if defect then
    emq_bury(base, id, now, defect)
    emq_record(base, recmax, id, 'dead', attempts, 'error', defect, now)
    failed = failed + 1
    return false
  end
  call('HSET', jk, 'state', 'active', 'attempts', ATTEMPTS[att + 1] or att + 1)
  if att > 0 then again[#again + 1] = id end
  bytes = bytes + #data
  if fresh and (att > 0 or g) then
    -- the first job that is not a fresh flat one: every job before it was
    fresh = false
    for i = 1, nout, 2 do
      more[i] = 1
      more[i + 1] = ''
    end
  end
  if not fresh then
    more[nout + 1] = att + 1
    more[nout + 2] = g or ''
  end
  out[nout + 1] = id
  out[nout + 2] = data
  nout = nout + 2
  return true
end

-- each pop either hands out a job, buries a bad row or drops a member: bounded by n, the ring's
-- length and the bad rows met (a bound keeps a ring full of bad rows from running long)
-- the ring's length kept here (this script is its only writer while it runs): no LLEN per pop
local budget = n + ring_len + 1000
local len = ring_len
-- the groups hash's writes, made once at the end, in the order the per-member writes would have
-- made them: dropped, the r: flags of the members dropped from the ring (deleted first, so the
-- hash never holds more fields than before the claim and keeps its encoding); counted, the a:<g>
-- field and count of each group a job was taken from, in the order of its first job. seen[g]: the
-- j-th such group, its count and limit kept in counts[j], limits[j] for when the claim meets g
-- again (pushed back; or a duplicate member, by hand)
local dropped, counted, seen, counts, limits = {}, {}, {}, {}, {}
while got < n and bytes < maxbytes and budget > 0 do
  budget = budget - 1
  local m = redis.call('LPOP', ring)
  if not m then break end
  len = len - 1
  if m == '~' then
    local want = 1
    if len == 0 then want = n - got end
    -- ZRANGE + ZREMRANGEBYRANK rather than ZPOPMIN: no score formatted per job (a printf each);
    -- taken in order until the bytes run out, then the ones met leave pending (take writes no
    -- member of pending)
    -- one member more than wanted: whether pending holds more after these, with no ZCARD
    local popped = redis.call('ZRANGE', pending, '0', emq_text(want))
    local met = #popped
    if met > want then met = want end
    local used = 0
    while used < met and bytes < maxbytes do
      used = used + 1
      local id = popped[used]
      local jk = jobs .. id
      -- a fresh flat row (data, then state pending: never claimed, no budget, no cancel) is
      -- known by its values alone: exactly two, the second 'pending'. HVALS, not HGETALL: half the
      -- reply to turn into a Lua table, about 3k instructions per claimed job (callgrind). Every
      -- writer creates a row with `data` first and rewrites fields in place, so a row with two
      -- values ending in 'pending' has no field but data and state; a row changed by hand in one
      -- step (a field set, added or deleted) never looks fresh and goes to take's checks.
      -- A fresh row is handed out here, with no call and none of take's checks (they cannot fail
      -- on it: attempts 0 is below every budget); any other row goes through take, which reads
      -- it whole (a key of another type too: its error reply has no values). The lines below are
      -- take's hand-out for attempts 0 and no group, kept inline: as a shared function the call
      -- cost about 900 instructions per claimed job (callgrind)
      local vals = read('HVALS', jk)
      if #vals == 2 and vals[2] == 'pending' then
        call('HSET', jk, 'state', 'active', 'attempts', '1')
        local data = vals[1]
        bytes = bytes + #data
        if not fresh then
          more[nout + 1] = 1
          more[nout + 2] = ''
        end
        out[nout + 1] = id
        out[nout + 2] = data
        nout = nout + 2
        got = got + 1
      elseif take(id, nil, jk) then
        got = got + 1
      end
    end
    if used > 0 then redis.call('ZREMRANGEBYRANK', pending, '0', emq_text(used - 1)) end
    -- a member of pending not used (past the wanted ones, or met once the bytes ran out): more wait
    if used < #popped then
      redis.call('RPUSH', ring, '~')
      len = len + 1
    else
      dropped[#dropped + 1] = 'r:~'
    end
  else
    -- the group's (active count, limit): kept here once a job was taken from it, else read as
    -- emq_slots reads them
    local j = seen[m]
    local a, limit
    if j then
      a, limit = counts[j], limits[j]
    else
      local f = redis.call('HMGET', groups, 'a:' .. m, 'l:' .. m, 'l:~')
      a, limit = tonumber(f[1]) or 0, tonumber(f[2]) or tonumber(f[3]) or 1
    end
    local lane = base .. 'lane:' .. m
    if a < limit then
      local id = redis.call('LPOP', lane)
      if id and take(id, m) then
        got = got + 1
        a = a + 1
        if not j then
          j = #limits + 1
          seen[m] = j
          limits[j] = limit
          counted[2 * j - 1] = 'a:' .. m
        end
        counts[j] = a
        counted[2 * j] = emq_text(a)
      end
    end
    if a < limit and redis.call('LLEN', lane) > 0 then
      redis.call('RPUSH', ring, m)
      len = len + 1
    else
      dropped[#dropped + 1] = 'r:' .. m
    end
  end
end
if #dropped > 0 then emq_bulk('HDEL', groups, dropped) end
if #counted > 0 then emq_bulk('HSET', groups, counted) end
-- into `active` after its reserved member (added first, it makes a new or small `active` a skiplist
-- before any lease goes in), newest id first: should `active` stay a listpack anyway (a server whose
-- zset-max-listpack-value exceeds the member's 95 bytes), equal scores sit in id order and each
-- insert scans from the head, so descending order scans once per member where ascending scans twice
-- (100 members: 143 µs against 521 µs)
if nout > 0 then
  local args, k = { 'inf', emq_active_pin() }, 2
  for i = nout - 1, 1, -2 do
    args[k + 1] = deadline
    args[k + 2] = out[i]
    k = k + 2
  end
  emq_bulk('ZADD', active, args)
  if #again > 0 then emq_bulk('SADD', base .. 'reclaimed', again) end
end
emq_count(base, 'failed', failed)
emq_count(base, 'cancelled', cancelled)
if nout == 0 then return out end
if fresh then out[nout + 1] = {} else out[nout + 1] = more end
return out
