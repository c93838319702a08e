-- Write the history points of the 10 s intervals starting at epoch seconds ARGV[6..]
-- (oldest first), once each: an interval with a point already (another replica sampled
-- it) is left alone. Writing the last interval of a minute also writes that minute's point
-- into `hist1m` (once): the gauges as the minute ends, the counts summed, the percentiles
-- of the minute's buckets. ARGV: now (ms), heartbeat timeout (ms), max points kept, max
-- minute points kept, how many of the first intervals were quiet (their gauges are zero:
-- the sampler skipped the endpoint for want of any sign of activity), t.... The other
-- intervals' gauges (queue depths, jobs in progress, workers running / idle / starting)
-- are read as of now; each interval's completed/failed counts, cold starts, queue-delay
-- and execution-time percentiles come from `iv:<t>` (counted by finalize, beat and take).
-- Returns {points written, 1 if the newest interval's point is quiet (all zero: nothing
-- queued, running, ended, started or alive), else 0}.
local now, timeout, keep = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local keep_minutes, zeros = tonumber(ARGV[4]), tonumber(ARGV[5])
local hist, minutes = P .. 'hist', P .. 'hist1m'
local ZERO = {inQueue = 0, inQueueLow = 0, inProgress = 0, workersRunning = 0,
  workersIdle = 0, workersStarting = 0}
local gauges
local function read_gauges()
  local alive, busy = live_workers(now, timeout)
  return {inQueue = redis.call('ZCARD', P .. 'q'), inQueueLow = redis.call('ZCARD', P .. 'ql'),
    inProgress = redis.call('ZCARD', P .. 'run'), workersRunning = busy,
    workersIdle = #alive - busy,
    workersStarting = tonumber(redis.call('HGET', P .. 'ws', 'initializing')) or 0}
end
-- The middle of the bucket where the cumulative count reaches q of all counted (ms); null
-- when none were counted. `buckets`: {bucket, count} sorted by bucket, `total` their sum.
local function percentile(buckets, total, q)
  if total == 0 then return cjson.null end
  local seen = 0
  for _, b in ipairs(buckets) do
    seen = seen + b[2]
    if seen >= q * total then
      return math.floor((1.1 ^ b[1] + 1.1 ^ (b[1] + 1)) / 2 - 1 + 0.5)
    end
  end
end
-- The counts of the intervals starting at t0, t0 + 10, ... t1: jobs completed, failed, cold
-- starts, and
-- the buckets ('d<bucket>': queue delays of jobs taken, 'x<bucket>': execution times of
-- jobs ended) merged, sorted, with their totals.
local function counted(t0, t1)
  local completed, failed, starts, merged, totals = 0, 0, 0, {d = {}, x = {}}, {d = 0, x = 0}
  for s = t0, t1, 10 do
    local iv = redis.call('HGETALL', P .. 'iv:' .. s)
    for i = 1, #iv, 2 do
      local field, n = iv[i], tonumber(iv[i + 1])
      local kind = string.sub(field, 1, 1)
      if field == 'c' then completed = completed + n
      elseif field == 'f' then failed = failed + n
      elseif field == 's' then starts = starts + n
      elseif merged[kind] then
        local b = tonumber(string.sub(field, 2))
        merged[kind][b] = (merged[kind][b] or 0) + n
        totals[kind] = totals[kind] + n
      end
    end
  end
  local buckets = {d = {}, x = {}}
  for kind, m in pairs(merged) do
    for b, n in pairs(m) do table.insert(buckets[kind], {b, n}) end
    table.sort(buckets[kind], function(a, b) return a[1] < b[1] end)
  end
  return completed, failed, starts, buckets, totals
end
local function point(t, g, t_end)
  local completed, failed, starts, buckets, totals = counted(t, t_end or t)
  return {t = t, inQueue = g.inQueue, inQueueLow = g.inQueueLow, inProgress = g.inProgress,
    workersRunning = g.workersRunning, workersIdle = g.workersIdle,
    workersStarting = g.workersStarting, completed = completed, failed = failed,
    coldStarts = starts,
    delayP50 = percentile(buckets.d, totals.d, 0.5),
    delayP95 = percentile(buckets.d, totals.d, 0.95),
    executionP50 = percentile(buckets.x, totals.x, 0.5),
    executionP95 = percentile(buckets.x, totals.x, 0.95)}
end
local function is_quiet(p)
  return p.inQueue == 0 and p.inQueueLow == 0 and p.inProgress == 0
    and p.workersRunning == 0 and p.workersIdle == 0 and p.workersStarting == 0
    and p.completed == 0 and p.failed == 0 and (p.coldStarts or 0) == 0
end
local first, last = tonumber(ARGV[6]), tonumber(ARGV[#ARGV])
local have, newest = {}, nil
local existing = redis.call('ZRANGEBYSCORE', hist, first, last, 'WITHSCORES')
for i = 1, #existing, 2 do
  local t = tonumber(existing[i + 1])
  have[t] = true
  if t == last then newest = cjson.decode(existing[i]) end
end
local add = {}
local ends = {}  -- the points written that end a minute: {t, point}
for i = 6, #ARGV do
  local t = tonumber(ARGV[i])
  if not have[t] then
    local g = ZERO
    if i - 5 > zeros then
      gauges = gauges or read_gauges()
      g = gauges
    end
    local p = point(t, g)
    if t == last then newest = p end
    add[#add + 1] = t
    add[#add + 1] = cjson.encode(p)
    if (t + 10) % 60 == 0 then ends[#ends + 1] = {t, g} end
  end
end
if #add > 0 then
  redis.call('ZADD', hist, unpack(add))
  redis.call('ZREMRANGEBYRANK', hist, 0, -keep - 1)
end
for _, e in ipairs(ends) do
  local m = e[1] - 50
  if redis.call('ZCOUNT', minutes, m, m) == 0 then
    redis.call('ZADD', minutes, m, cjson.encode(point(m, e[2], e[1])))
    redis.call('ZREMRANGEBYRANK', minutes, 0, -keep_minutes - 1)
  end
end
return {#add / 2, (newest and is_quiet(newest)) and 1 or 0}
