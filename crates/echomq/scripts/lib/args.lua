-- lib/args.lua — A script's arguments: whole numbers, optional values ('' = none, else '+' and the
-- bytes), and the EMQARGS refusal of malformed arguments, returned before anything is written.

-- whether n is a whole number from least up to 2^53 (nil, NaN and the infinities are not: NaN and
-- inf % 1 are NaN)
local function emq_whole(n, least)
  return n ~= nil and n >= least and n < 9007199254740992 and n % 1 == 0
end

-- an optional value from ARGV: '' = none, else the value behind a one-byte '+' prefix
local function emq_opt(v)
  if v == '' then return nil end
  return string.sub(v, 2)
end

-- a refusal of malformed arguments, before anything is written
local function emq_bad_args(verb, what)
  return redis.error_reply('EMQARGS ' .. verb .. ': ' .. what)
end
