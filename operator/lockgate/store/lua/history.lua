-- Write the history points of the 10 s intervals starting at epoch seconds ARGV[4..], once
-- each: an interval with a point already (another replica sampled it) is left alone.
-- ARGV: now (ms), heartbeat timeout (ms), max points kept, t.... The gauges (queue depths,
-- jobs in progress, workers running / idle / starting) are read as of now; each interval's
-- completed/failed counts and queue-delay percentiles come from `iv:<t>` (counted by
-- finalize and take). Returns how many points were written.
local now, timeout, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local hist = P .. 'hist'
local gauges
local function read_gauges()
  local alive, busy = live_workers(now, timeout)
  return {inQueue = redis.call('ZCARD', P .. 'q'), inQueueLow = redis.call('ZCARD', P .. 'ql'),
    inProgress = redis.call('ZCARD', P .. 'run'), workersRunning = busy,
    workersIdle = #alive - busy,
    workersStarting = tonumber(redis.call('HGET', P .. 'ws', 'initializing')) or 0}
end
local function point(t)
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
  return cjson.encode({t = t, inQueue = gauges.inQueue, inQueueLow = gauges.inQueueLow,
    inProgress = gauges.inProgress, workersRunning = gauges.workersRunning,
    workersIdle = gauges.workersIdle, workersStarting = gauges.workersStarting,
    completed = completed, failed = failed, delayP50 = percentile(0.5),
    delayP95 = percentile(0.95)})
end
local written = 0
for i = 4, #ARGV do
  local t = tonumber(ARGV[i])
  if #redis.call('ZRANGEBYSCORE', hist, t, t) == 0 then
    gauges = gauges or read_gauges()
    redis.call('ZADD', hist, t, point(t))
    written = written + 1
  end
end
if written > 0 then redis.call('ZREMRANGEBYRANK', hist, 0, -keep - 1) end
return written
