-- lib/wake.lua — Whether the queue is paused, and the wake tokens a script pushes for the jobs it
-- made claimable (at most 16 kept; none while paused: resume pushes them).

-- whether the queue is paused: a paused queue makes nothing claimable, so its scripts push no wake
-- (resume pushes them)
local function emq_paused_read(base)
  return redis.call('EXISTS', base .. 'paused') == 1
end

-- one wake token per job made claimable, at most 16, then the list trimmed to its newest 16; none
-- while paused (`paused` as emq_paused_read read it before the first write; `wake` reached then)
local function emq_wake(base, n, paused)
  if n <= 0 or paused then return end
  if n > 16 then n = 16 end
  local tokens = {}
  for i = 1, n do tokens[i] = '1' end
  if redis.call('RPUSH', base .. 'wake', unpack(tokens)) > 16 then
    redis.call('LTRIM', base .. 'wake', '-16', '-1')
  end
end
