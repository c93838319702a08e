-- Write the history points of the 10 s intervals starting at epoch seconds `slots`
-- (ARGV[slots_from..], oldest first), once each: an interval with a point already (another
-- replica sampled it) is left alone. Writing the last interval of a minute also writes
-- that minute's point into `hist1m` (once): the gauges as the minute ends, the counts summed, the percentiles
-- of the minute's buckets. Arguments: store/args_workers.py History; the first `zeros`
-- intervals were quiet (their gauges are zero: the sampler skipped the endpoint for want
-- of any sign of activity). The other intervals' gauges (queue depths, jobs in progress, workers
-- running / idle / starting / throttled / unhealthy) are read as of now; each interval's
-- counts of jobs ended (completed, failed, timed out, cancelled), cold starts, queue-delay
-- and execution-time percentiles come from `iv:<t>` (counted by finalize, beat and take).
-- Each point written also adds its ready workers (running + idle) times the interval to
-- the usage of its hour (`use:<chunk>`, see keys.py): worker-seconds, GPU-seconds of the
-- type `gpu_type` (`gpus` per worker; 0 for a CPU endpoint) and vCPU-seconds (`vcpus` per
-- worker; 0 for a GPU endpoint); `chunk_s` seconds of hours per usage hash, `use_keep` how
-- long (s) a usage hash outlives its last hour. Once per interval, as the point.
-- Returns {points written, 1 if the newest interval's point is quiet (all zero: nothing
-- queued, running, ended, started or alive), else 0, the newest hour (epoch s) whose usage
-- this call added to, else 0}.
local FIRST_SLOT = slots_from  -- ARGV[slots_from..]: the intervals to write
local INTERVAL, HOUR = INTERVAL_S, 3600  -- s
local used = 0
local function add_usage(t, g)
  local seconds = (g.workersRunning + g.workersIdle) * INTERVAL
  if seconds == 0 then return end
  local hour, chunk = t - t % HOUR, t - t % chunk_s
  local use = P .. 'use:' .. chunk
  redis.call('HINCRBY', use, hour .. ':w', seconds)
  if gpus > 0 then redis.call('HINCRBY', use, hour .. ':g:' .. gpu_type, seconds * gpus) end
  if vcpus > 0 then redis.call('HINCRBY', use, hour .. ':c', seconds * vcpus) end
  redis.call('EXPIREAT', use, chunk + chunk_s + use_keep)
  if hour > used then used = hour end
end
local hist, minutes = P .. 'hist', P .. 'hist1m'
local ZERO = {inQueue = 0, inQueueLow = 0, inProgress = 0, workersRunning = 0,
  workersIdle = 0, workersStarting = 0, workersThrottled = 0, workersUnhealthy = 0}
local gauges
local function read_gauges()
  local alive, busy = live_workers(now, timeout)
  local ws = redis.call('HMGET', P .. 'ws', 'initializing', 'throttled', 'unhealthy')
  return {inQueue = redis.call('ZCARD', P .. 'q'), inQueueLow = redis.call('ZCARD', P .. 'ql'),
    inProgress = redis.call('ZCARD', P .. 'run'), workersRunning = busy,
    workersIdle = #alive - busy, workersStarting = tonumber(ws[1]) or 0,
    workersThrottled = tonumber(ws[2]) or 0, workersUnhealthy = tonumber(ws[3]) or 0}
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
-- The counts of the intervals starting at t0, t0 + 10, ... t1 (`n`: jobs ended by final
-- state (`c`, `f`, `t`, `k`) and cold starts (`s`)), and the buckets ('b<bucket>': cold-start
-- times) ('d<bucket>': queue delays of jobs taken, 'x<bucket>': execution times of
-- jobs ended) merged, sorted, with their totals.
local function counted(t0, t1)
  local n, merged, totals = {c = 0, f = 0, t = 0, k = 0, s = 0}, {d = {}, x = {}, b = {}},
    {d = 0, x = 0, b = 0}
  for s = t0, t1, 10 do
    local iv = redis.call('HGETALL', P .. 'iv:' .. s)
    for i = 1, #iv, 2 do
      local field, count = iv[i], tonumber(iv[i + 1])
      local kind = string.sub(field, 1, 1)
      if n[field] then n[field] = n[field] + count
      elseif merged[kind] then
        local b = tonumber(string.sub(field, 2))
        merged[kind][b] = (merged[kind][b] or 0) + count
        totals[kind] = totals[kind] + count
      end
    end
  end
  local buckets = {d = {}, x = {}, b = {}}
  for kind, m in pairs(merged) do
    for b, n in pairs(m) do table.insert(buckets[kind], {b, n}) end
    table.sort(buckets[kind], function(a, b) return a[1] < b[1] end)
  end
  return n, buckets, totals
end
local function point(t, g, t_end)
  local n, buckets, totals = counted(t, t_end or t)
  return {t = t, inQueue = g.inQueue, inQueueLow = g.inQueueLow, inProgress = g.inProgress,
    workersRunning = g.workersRunning, workersIdle = g.workersIdle,
    workersStarting = g.workersStarting, workersThrottled = g.workersThrottled,
    workersUnhealthy = g.workersUnhealthy, completed = n.c, failed = n.f, timedOut = n.t,
    cancelled = n.k, coldStarts = n.s,
    delayP50 = percentile(buckets.d, totals.d, 0.5),
    delayP95 = percentile(buckets.d, totals.d, 0.95),
    executionP50 = percentile(buckets.x, totals.x, 0.5),
    executionP95 = percentile(buckets.x, totals.x, 0.95),
    coldStartP50 = percentile(buckets.b, totals.b, 0.5),
    coldStartP95 = percentile(buckets.b, totals.b, 0.95)}
end
-- A point's fields that are all zero in a quiet one (a point written before a field
-- existed lacks it: zero).
local QUIET = {'inQueue', 'inQueueLow', 'inProgress', 'workersRunning', 'workersIdle',
  'workersStarting', 'workersThrottled', 'workersUnhealthy', 'completed', 'failed',
  'timedOut', 'cancelled', 'coldStarts'}
local function is_quiet(p)
  for _, field in ipairs(QUIET) do
    if (p[field] or 0) ~= 0 then return false end
  end
  return true
end
local first, last = tonumber(ARGV[FIRST_SLOT]), tonumber(ARGV[#ARGV])
local have, newest = {}, nil
local existing = redis.call('ZRANGEBYSCORE', hist, first, last, 'WITHSCORES')
for i = 1, #existing, 2 do
  local t = tonumber(existing[i + 1])
  have[t] = true
  if t == last then newest = cjson.decode(existing[i]) end
end
local add = {}
local ends = {}  -- the points written that end a minute: {t, point}
for i = FIRST_SLOT, #ARGV do
  local t = tonumber(ARGV[i])
  if not have[t] then
    local g = ZERO
    if i - FIRST_SLOT + 1 > zeros then
      gauges = gauges or read_gauges()
      g = gauges
    end
    local p = point(t, g)
    add_usage(t, g)
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
return {#add / 2, (newest and is_quiet(newest)) and 1 or 0, used}
