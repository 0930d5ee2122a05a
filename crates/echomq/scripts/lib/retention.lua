-- lib/retention.lua — Finished rows (completed, cancelled) under the queue's retention: read with
-- the rows its trimming deletes reached before the first write, then expired, kept or deleted.

-- a queue's retention (emq:{q}:retention, written by set_retention; a field absent = its default):
-- the newest `keep` rows of each finished state are kept — completed rows in the set `completed`,
-- cancelled rows in `cancelled`, each by finish time (0: a row is deleted as it finishes), each for about
-- `age` ms (trimmed as later jobs of the queue finish), its output only up to `cap` bytes (a
-- longer one is dropped, its size kept as output_dropped). The defaults are those of
-- `Retention::default` (store.rs); a conformance case reads them back on both stores.
local function emq_retention_of(base)
  local f = redis.call('HMGET', base .. 'retention', 'keep', 'age', 'cap')
  return { keep = tonumber(f[1]) or 10000, age = tonumber(f[2]) or 86400000, cap = tonumber(f[3]) or 65536 }
end

-- before `adding` rows finish as `state` (completed, cancelled): the queue's retention
-- (emq_retention_of), the set of that state's kept rows (ret.done), and, when rows are kept, the
-- store's time (ret.now: `now` when the caller has it) and the rows trimming deletes reached — the
-- oldest of the set, those finished more than `age` ms before now (at most 100 a call) or past the
-- newest `keep` — so that its reads and deletes come after no refusal. emq_expire and emq_finish
-- take what it returns.
local function emq_retention_read(base, state, adding, now)
  local ret = emq_retention_of(base)
  ret.expired = {}
  ret.done = base .. state
  if ret.keep <= 0 or adding <= 0 then return ret end
  ret.now = now or emq_now()
  local done = ret.done
  ret.expired = redis.call('ZRANGEBYSCORE', done, '-inf', ret.now - ret.age, 'LIMIT', 0, 100)
  local trim = math.max(redis.call('ZCARD', done) + adding - ret.keep, #ret.expired)
  if trim > 0 then emq_touch(base, emq_rows_of(redis.call('ZRANGE', done, 0, trim - 1), {})) end
  return ret
end

-- the kept rows past their age (emq_retention_read's), deleted: the first write of the finishing
-- step, so the count trimming of emq_finish counts without them
local function emq_expire(base, ret)
  if #ret.expired == 0 then return end
  emq_del_rows(base, ret.expired)
  emq_bulk('ZREM', ret.done, ret.expired)
end

-- a finished job (completed / cancelled) under the queue's retention `ret` (emq_retention_read's):
-- deleted, or kept — its state, finish time and value (`field`: the output, or the cancel reason as
-- last_error), its payload dropped — with its state's set (ret.done) trimmed to the newest `keep`
local function emq_finish(base, id, state, now, ret, field, value)
  local jk = base .. 'job:' .. id
  if ret.keep <= 0 then
    redis.call('DEL', jk)
    return
  end
  local row = { 'state', state, 'finished_at', now }
  if value then
    if field == 'output' and #value > ret.cap then
      row[5], row[6] = 'output_dropped', #value
    else
      row[5], row[6] = field, value
    end
  end
  redis.call('HSET', jk, unpack(row))
  -- a kept row holds the outcome, not the payload, and no earlier attempt's error (a cancel's
  -- reason is its last_error)
  if value and field == 'last_error' then
    redis.call('HDEL', jk, 'data')
  else
    redis.call('HDEL', jk, 'data', 'last_error')
  end
  local done = ret.done
  redis.call('ZADD', done, now, id)
  local over = redis.call('ZCARD', done) - ret.keep
  if over > 0 then
    for _, old in ipairs(redis.call('ZRANGE', done, 0, over - 1)) do
      redis.call('DEL', base .. 'job:' .. old)
    end
    redis.call('ZREMRANGEBYRANK', done, 0, over - 1)
  end
end
