-- Write one history point for the 10 s interval starting at epoch second ARGV[1], once:
-- when a point for it exists already (another replica sampled it), nothing changes.
-- ARGV: t, inQueue, inQueueLow, inProgress, workersRunning, workersIdle, workersStarting,
-- max points kept. The interval's completed/failed counts and queue-delay percentiles
-- come from `iv:<t>` (counted by finalize and take). Returns 1 when written, else 0.
local t = tonumber(ARGV[1])
local hist = P .. 'hist'
if #redis.call('ZRANGEBYSCORE', hist, t, t) > 0 then return 0 end
local iv = redis.call('HGETALL', P .. 'iv:' .. t)
local completed, failed, buckets, taken = 0, 0, {}, 0
for i = 1, #iv, 2 do
  local field, n = iv[i], tonumber(iv[i + 1])
  if field == 'c' then completed = n
  elseif field == 'f' then failed = n
  else
    buckets[#buckets + 1] = {tonumber(string.sub(field, 2)), n}
    taken = taken + n
  end
end
table.sort(buckets, function(a, b) return a[1] < b[1] end)
-- The middle of the bucket where the cumulative count reaches q of the jobs taken (ms).
local function percentile(q)
  if taken == 0 then return cjson.null end
  local seen = 0
  for _, b in ipairs(buckets) do
    seen = seen + b[2]
    if seen >= q * taken then
      return math.floor((1.1 ^ b[1] + 1.1 ^ (b[1] + 1)) / 2 - 1 + 0.5)
    end
  end
end
local point = cjson.encode({t = t, inQueue = tonumber(ARGV[2]), inQueueLow = tonumber(ARGV[3]),
  inProgress = tonumber(ARGV[4]), workersRunning = tonumber(ARGV[5]),
  workersIdle = tonumber(ARGV[6]), workersStarting = tonumber(ARGV[7]),
  completed = completed, failed = failed, delayP50 = percentile(0.5),
  delayP95 = percentile(0.95)})
redis.call('ZADD', hist, t, point)
redis.call('ZREMRANGEBYRANK', hist, 0, -tonumber(ARGV[8]) - 1)
return 1
