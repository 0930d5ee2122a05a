-- lib/fence.lua — The holder's fence: a verb acting on a held job acts only while the row's
-- attempts equal its token and its id is in `active`; and the attempts a job has used.

-- the fence of every holder verb: the caller holds the job when the row's attempts equal its token
-- and its id is in `active` (the caller tests that). Returns -1 (gone: no row) or 0 (stale: another
-- token, or none); else nil, the row's group (nil for a flat job) and the HMGET reply, whose fields
-- from the third on are `...`. It reads no state: every script that moves an id into or out of
-- `active` writes the row's state in the same step.
local function emq_fence(jk, token, ...)
  local r = redis.call('HMGET', jk, 'attempts', 'group', ...)
  if r[1] ~= token then
    if r[1] or redis.call('EXISTS', jk) == 1 then return 0 end
    return -1
  end
  return nil, r[2] or nil, r
end

-- the attempts a job has used: its claims (attempts) less the claims that used none (free); a
-- malformed count reads as 0 (claim buries such a row before it is ever held)
local function emq_used(attempts, free)
  return (tonumber(attempts) or 0) - (tonumber(free) or 0)
end
