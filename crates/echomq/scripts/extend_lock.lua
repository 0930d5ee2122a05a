-- extend_lock — a self-contained file: a raw EVAL of it runs with the KEYS, ARGV and replies below.
-- Re-scores one lease, token-fenced, on the server clock: the lease IS the active score, so there
-- is no separate lock key to refresh.
-- An id not in `active` (or a row not in state active) is stale: a re-score of it would put a
-- settled or reaped job back in `active`, leased to no one (ZADD XX: never adds).
-- Reads first: the row and the membership, then the one write.
--
-- KEYS[1] emq:{q}:active      (zset, score = lease deadline ms)
-- KEYS[2] emq:{q}:job:<id>    (hash, the row)
-- ARGV[1] id
-- ARGV[2] the attempts token
-- ARGV[3] lease ms (> 0)
--
-- Replies: 1 = the lease re-scored to now + lease; -1 = gone (no row);
--          error EMQSTALE (not the current holder); error EMQARGS.
--
-- Generated from scripts/src/extend_lock.lua and the library (scripts/lib/): edit those, then
-- run EMQ_REGENERATE=1 cargo test -p echomq --lib scripts

-- the clock as one script call reads it: TIME once at most, so that every step of a call (a
-- settle and the claim behind it) sees one instant
local emq_clock = {}

-- the store's time in µs (the clock of the rate limits)
local function emq_now_us()
  if not emq_clock[1] then
    local t = redis.call('TIME')
    emq_clock[1] = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  return emq_clock[1]
end

-- the store's clock, in ms: emq_now_us's whole ms
local function emq_now()
  return math.floor(emq_now_us() / 1000)
end

local active, jk = KEYS[1], KEYS[2]
local id, token, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])
-- finite only: tonumber takes 'inf' and 'nan', and a deadline at +inf is out of every recovery range
if not lease or lease <= 0 or lease >= 2^53 or lease ~= lease then
  return redis.error_reply('EMQARGS extend_lock: lease must be > 0 and finite')
end
local r = redis.call('HMGET', jk, 'state', 'attempts')
if not r[1] then return -1 end
if r[1] ~= 'active' or r[2] ~= token or not redis.call('ZSCORE', active, id) then
  return redis.error_reply('EMQSTALE extend token mismatch')
end
redis.call('ZADD', active, 'XX', emq_now() + lease, id)
return 1
