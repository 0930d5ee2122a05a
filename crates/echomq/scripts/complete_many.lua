-- complete_many — complete for a batch in one step (the consumer's group commit). Each entry is
-- fenced on its own; a repeated entry is stale after its first settle.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] n, 1..1000
-- ARGV[3] retain: newest completed rows kept (0 = delete the rows)
-- ARGV[4] record MAXLEN (0 = no completion records)
-- ARGV[5 + 3(i-1) ..] per job: id, attempts token, output ('' = none, else '+' and the bytes)
--   or, the plain layout: ARGV[5 + 2(i-1) ..] per job: id, attempts token (no output): chosen
--   when ARGV holds exactly 4 + 2n arguments
--   or, the shared-token layout (n >= 2): ARGV[5] the attempts token of every job, ARGV[5 + i]
--   the id of job i (no output): chosen when ARGV holds exactly 5 + n arguments (a fresh
--   backlog's batch is all first attempts: one argument per job, each a string to take in)
--
-- Also reads and writes emq:{q}:reclaimed (set: the ids in `active` past their first attempt).
--
-- Replies: {code, …} per entry in order: 1 = completed, 0 = stale, -1 = gone; error EMQARGS.
local active = KEYS[1]
local base = ARGV[1]
local n, keep, recmax = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not n or n < 1 or n > 1000 then return emq_bad_args('complete_many', 'batch shape') end
-- arguments per entry: 3 (with outputs), 2 (plain) or 1 (shared token); first: job 1's id
local per, first, shared = 3, 5, nil
if #ARGV == 4 + 2 * n then per = 2
elseif n >= 2 and #ARGV == 5 + n then per, first, shared = 1, 6, ARGV[5]
elseif #ARGV ~= 4 + 3 * n then return emq_bad_args('complete_many', 'batch shape') end
if not keep or not recmax then return emq_bad_args('complete_many', 'settle options') end
local jobs, call = base .. 'job:', redis.call
-- every entry fenced first (reads only: nothing that can raise comes after the first write); the
-- reply table holds, until the ZREM below, what the fence found: 0 / -1 for a refusal, else the
-- row's group or true (flat) — no table per entry
-- rows: each entry's row key, built once; fenced: the ids of the entries the fence let through.
-- A queue with no lane job in `active` (checked once, for a batch of 4 or more: one or two calls)
-- needs no row's group: its fence reads the token alone.
local flat = n >= 4 and emq_no_lanes(base)
local reply, rows = {}, {}
local fenced, nfenced = {}, 0
-- the fenced entries past their first attempt: out of `reclaimed` once out of `active` (a fenced
-- entry the ZREM did not remove is out of `active` already)
local again = {}
-- the group commit of a fresh backlog (the shared token 1, a flat queue, nothing retained or
-- recorded) is fenced for the whole batch without reading a row: an id in `active` and not in
-- `reclaimed` is on attempts 1 (emq_unmark), so held by token 1; one EXISTS of every row counts 1
-- per entry whose row is there (repeats included): n, none is gone. Membership is then the ZREM's
-- count below, as for any batch. Else each entry is fenced on its own.
local proven = false
if shared == '1' and flat and keep <= 0 and recmax <= 0 then
  for i = 1, n do
    fenced[i] = ARGV[5 + i]
    rows[i] = jobs .. fenced[i]
  end
  local marked = base .. 'reclaimed'
  proven = call('EXISTS', marked) == 0
  if not proven then
    proven = true
    local m = call('SMISMEMBER', marked, unpack(fenced))
    for i = 1, n do
      if m[i] == 1 then
        proven = false
        break
      end
    end
  end
  proven = proven and call('EXISTS', unpack(rows)) == n
  if proven then
    nfenced = n
    for i = 1, n do reply[i] = true end
  else
    fenced = {}
  end
end
if not proven then
  for i = 1, n do
    local a = first + per * (i - 1)
    local id = ARGV[a]
    local jk = jobs .. id
    rows[i] = jk
    local token = shared or ARGV[a + 1]
    local refused, g = emq_fence(jk, token, flat)
    reply[i] = refused or g or true
    if not refused then
      nfenced = nfenced + 1
      fenced[nfenced] = id
      if token ~= '1' then again[#again + 1] = id end
    end
  end
end
-- then the fenced entries leave `active` in one ZREM (n at most 1000: one call), whose count tells
-- their membership (DESIGN §1) in the common case: all of them removed, every one settles; none,
-- every one is stale. Otherwise (an entry repeated in the batch, or a job that left `active` with
-- its token, as on a reap) each is told apart after the fact by its row's state, which every verb
-- moving an id into or out of `active` writes in the same step (so 'active' here means it was a
-- member and is removed now); a repeat is stale after its first settle. pcall: a read after the
-- first write never raises (a batch fenced whole read no row as a hash).
if nfenced == 0 then return reply end
local removed = call('ZREM', active, unpack(fenced))
if #again > 0 then emq_bulk('SREM', base .. 'reclaimed', again) end
-- the common group commit: every entry held and removed (so no repeat among them), flat, neither
-- retained nor recorded — every row deleted in bulk, no per-entry bookkeeping
if removed == n and flat and keep <= 0 and recmax <= 0 then
  for i = 1, n do reply[i] = 1 end
  emq_bulk('DEL', nil, rows)
  emq_count(base, 'completed', n)
  return reply
end
local seen = nil
if removed > 0 and removed < nfenced then seen = {} end
-- done: the entries settled; gone: their rows, when not retained; lanes: their groups
local done, gone, lanes = {}, {}, {}
for i = 1, n do
  local f = reply[i]
  if f ~= 0 and f ~= -1 then
    local settled = removed == nfenced
    if seen then
      local id = ARGV[first + per * (i - 1)]
      if not seen[id] then
        seen[id] = true
        settled = redis.pcall('HGET', rows[i], 'state') == 'active'
      end
    end
    if settled then
      reply[i] = 1
      done[#done + 1] = i
      if keep <= 0 then gone[#gone + 1] = rows[i] end
      if f ~= true then lanes[#lanes + 1] = f end
    else
      reply[i] = 0
    end
  end
end
if #done == 0 then return reply end
local now = 0
if keep > 0 or recmax > 0 then now = emq_now() end
if keep <= 0 then emq_bulk('DEL', nil, gone) end
if keep > 0 or recmax > 0 then
  for _, i in ipairs(done) do
    local a = first + per * (i - 1)
    local output = nil
    if per == 3 then output = emq_opt(ARGV[a + 2]) end
    if keep > 0 then emq_finish(base, ARGV[a], 'completed', now, keep, 'output', output) end
    emq_record(base, recmax, ARGV[a], 'completed', shared or ARGV[a + 1], 'output', output, now)
  end
end
-- each lane job's slot freed and its ring step; the wakes (one per group put back on the ring) in
-- one push for the batch
local wakes = 0
for _, g in ipairs(lanes) do wakes = wakes + emq_release(base, g) end
emq_wake(base, wakes)
emq_count(base, 'completed', #done)
return reply
