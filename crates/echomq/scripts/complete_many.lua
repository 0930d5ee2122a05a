-- complete_many — complete for a batch in one step (the consumer's group commit). Each entry is
-- fenced on its own; a repeated entry is stale after its first settle.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] n, 1..1000
-- ARGV[3] retain: newest completed rows kept (0 = delete the rows)
-- ARGV[4] record MAXLEN (0 = no completion records)
-- ARGV[5 + 3(i-1) ..] per job: id, attempts token, output ('' = none, else '+' and the bytes)
--
-- Replies: {code, …} per entry in order: 1 = completed, 0 = stale, -1 = gone; error EMQARGS.
local active = KEYS[1]
local base = ARGV[1]
local n, keep, recmax = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if not n or n < 1 or n > 1000 or #ARGV ~= 4 + 3 * n then return emq_bad_args('complete_many', 'batch shape') end
if not keep or not recmax then return emq_bad_args('complete_many', 'settle options') end
local ids = {}
-- every row fenced first (reads only: nothing that can raise comes after the first write)
local jobs, call = base .. 'job:', redis.call
local reply, fenced, groups, rows = {}, {}, {}, {}
for i = 1, n do
  local id = ARGV[2 + 3 * i]
  ids[i] = id
  rows[i] = jobs .. id
  local refused, row = emq_fence(rows[i], ARGV[3 + 3 * i])
  if refused then
    reply[i] = refused
  else
    fenced[#fenced + 1] = i
    groups[i] = row[3]
  end
end
-- then each fenced entry's membership, which is the reply of the ZREM its settle needs anyway
-- (DESIGN §1) — cheaper than one ZMSCORE for the batch, whose scores come back as formatted
-- doubles nobody reads; an entry repeated in the batch passed the fence too, and its second ZREM
-- answers 0: stale after its first settle
-- done: the entries settled; gone: their rows, when not retained
local done, gone, lanes = {}, {}, {}
for _, i in ipairs(fenced) do
  if call('ZREM', active, ids[i]) == 1 then
    reply[i] = 1
    done[#done + 1] = i
    if keep <= 0 then gone[#gone + 1] = rows[i] end
    if groups[i] then lanes[#lanes + 1] = groups[i] end
  else
    reply[i] = 0
  end
end
if #done == 0 then return reply end
local now = 0
if keep > 0 or recmax > 0 then now = emq_now() end
if keep <= 0 then call('DEL', unpack(gone)) end
if keep > 0 or recmax > 0 then
  for _, i in ipairs(done) do
    local output = emq_opt(ARGV[4 + 3 * i])
    if keep > 0 then emq_finish(base, ids[i], 'completed', now, keep, 'output', output) end
    emq_record(base, recmax, ids[i], 'completed', ARGV[3 + 3 * i], 'output', output, now)
  end
end
for _, g in ipairs(lanes) do emq_leave_lane(base, g) end
emq_count(base, 'completed', #done)
return reply
