-- Reserve rate and concurrency for one operation of one key owner (see store/limits.py).
-- Arguments: store/args_workers.py Limit. Returns {units granted, ms left in the window, slots this replica now holds}.
-- Grants never take the window's count past the rate, nor the replicas' slots past the
-- concurrency: a request is admitted only out of what was granted.
local start = now - now % window
local left_ms = start + window - now
local granted = 0
if rate >= 0 and want > 0 then
  local ck = P .. 'rl:' .. op .. ':' .. owner .. ':' .. start
  granted = math.max(0, math.min(want, rate - (tonumber(redis.call('GET', ck)) or 0)))
  if granted > 0 and redis.call('INCRBY', ck, granted) == granted then
    -- 1 s past the window's end: replicas whose clocks lag a little still find the count.
    redis.call('PEXPIRE', ck, left_ms + 1000)
  end
end
local held = 0
if conc >= 0 and slots >= 0 then
  local rk = P .. 'rc:' .. op .. ':' .. owner
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
