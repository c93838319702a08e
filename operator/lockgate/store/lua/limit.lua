-- Reserve rate and concurrency for one operation of one key owner (see store/limits.py).
-- ARGV: operation, owner, now (ms), window (ms), rate (-1: none), units wanted,
--       concurrency (-1: none), replica, slots wanted (-1: leave as is), lease (ms).
-- Returns {units granted, ms left in the window, slots this replica now holds}.
-- Grants never take the window's count past the rate, nor the replicas' slots past the
-- concurrency: a request is admitted only out of what was granted.
local now, window = tonumber(ARGV[3]), tonumber(ARGV[4])
local rate, want = tonumber(ARGV[5]), tonumber(ARGV[6])
local conc, replica, slots, lease = tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9]), tonumber(ARGV[10])
local start = now - now % window
local left_ms = start + window - now
local granted = 0
if rate >= 0 and want > 0 then
  local ck = P .. 'rl:' .. ARGV[1] .. ':' .. ARGV[2] .. ':' .. start
  granted = math.max(0, math.min(want, rate - (tonumber(redis.call('GET', ck)) or 0)))
  if granted > 0 and redis.call('INCRBY', ck, granted) == granted then
    -- 1 s past the window's end: replicas whose clocks lag a little still find the count.
    redis.call('PEXPIRE', ck, left_ms + 1000)
  end
end
local held = 0
if conc >= 0 and slots >= 0 then
  local rk = P .. 'rc:' .. ARGV[1] .. ':' .. ARGV[2]
  local others = 0
  local all = redis.call('HGETALL', rk)
  for i = 1, #all, 2 do
    local n, expiry = string.match(all[i + 1], '^(%d+):(%d+)$')
    if tonumber(expiry) <= now then
      redis.call('HDEL', rk, all[i])
    elseif all[i] ~= replica then
      others = others + tonumber(n)
    end
  end
  held = math.max(0, math.min(slots, conc - others))
  if held > 0 then
    redis.call('HSET', rk, replica, held .. ':' .. (now + lease))
    redis.call('PEXPIRE', rk, lease)
  else
    redis.call('HDEL', rk, replica)
  end
end
return {granted, left_ms, held}
