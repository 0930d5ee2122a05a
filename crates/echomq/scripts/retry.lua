-- retry — fenced: the holder hands the job back after a failure. When the attempts it has used
-- (attempts - free) reach its budget (its own max_attempts, else ARGV[5]) the job goes dead (metrics
-- failed); else it waits in `scheduled` until now + delay (delay 0: ready at once: pending or its
-- lane at a fresh rank of its priority), with the error as last_error (metrics retried); a job
-- scheduled ahead of every other wakes the parked consumers (emq_due_wake). A lane job
-- frees its slot either way; a waited job's id is published when it goes dead. Reads first (lib/keys.lua): the row, its group or the flat set, then the
-- writes.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- KEYS[3] emq:{q}:scheduled   (zset, score = due ms)
-- KEYS[4] emq:{q}:dead        (zset, score = time of death ms)
-- ARGV[1] the queue base emq:{q}:
-- ARGV[2] id
-- ARGV[3] the attempts token (a whole number)
-- ARGV[4] delay ms (>= 0)
-- ARGV[5] default max_attempts (>= 1)
-- ARGV[6] the error text
-- ARGV[7] record MAXLEN (0 = no record when it dead-letters)
--
-- Replies: 1 = retrying, 2 = dead, 0 = stale, -1 = gone; error EMQARGS.
local active, jk, scheduled = KEYS[1], KEYS[2], KEYS[3]
local base, id, token = ARGV[1], ARGV[2], ARGV[3]
local delay, maxdef, err, recmax = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6], tonumber(ARGV[7])
if not delay or delay < 0 or not maxdef or maxdef < 1 or not recmax then return emq_bad_args('retry', 'delay, max_attempts or record') end
if not emq_whole(tonumber(token), 0) then return emq_bad_args('retry', 'token') end
local refused, g, r = emq_fence(jk, token, 'free', 'max_attempts', 'waited', 'priority', 'kind')
if refused then return refused end
local used = emq_used(r[1], r[3])
local dead = used >= (tonumber(r[4] or maxdef) or maxdef)
local lanes, flat = {}, nil
if g then emq_lane_read(lanes, base, g, true) elseif not dead and delay <= 0 then flat = emq_flat_read(base) end
local paused = emq_paused_read(base)
local touch = { 'ring', 'wake', 'wake_any' }
if flat then emq_flat_touch(touch, flat, r[7] or '') end
if dead then
  touch[#touch + 1] = 'metrics:failed'
  if recmax > 0 then touch[#touch + 1] = 'completions' end
else
  touch[#touch + 1] = 'metrics:retried'
end
local now = emq_now()
local ranks, head = nil, nil
if not dead and delay <= 0 then ranks = emq_order_read(base, now, touch) end
if not dead and delay > 0 then head = emq_due_read(base) end
emq_touch(base, touch)
if redis.call('ZREM', active, id) == 0 then return 0 end
local reply, wakes = 1, 0
if dead then
  emq_bury(base, id, now, err)
  emq_count(base, 'failed', 1, now)
  emq_record(base, recmax, id, 'dead', used, 'error', err, now)
  emq_notify(base, r[5], id)
  reply = 2
else
  redis.call('HSET', jk, 'last_error', err)
  if delay > 0 then
    redis.call('HSET', jk, 'state', 'scheduled', 'run_at', now + delay)
    redis.call('ZADD', scheduled, now + delay, id)
    emq_due_wake(base, head, now + delay, paused)
  else
    emq_ready(base, id, g, g and lanes[g] or flat, ranks, r[6], r[7])
    emq_order_write(base, ranks)
    if not g then
      emq_flat_step(base, flat)
      emq_wake(base, 1, paused, r[7] or '')
    end
  end
  emq_count(base, 'retried', 1, now)
end
-- after the job is back in its lane, so the ring step sees it
if g then wakes = wakes + emq_lane_leave(base, g, lanes[g]) end
emq_wake(base, wakes, paused)
return reply
