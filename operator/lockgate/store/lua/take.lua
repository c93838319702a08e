-- A worker takes up to n jobs, normal queue first, then lowPriority. Also a heartbeat.
-- ARGV: worker, now, n, default execution timeout (ms), max bytes (the inputs taken stay
-- within it; the first job is taken whatever its size)[, ep, max attempts, retention
-- run, retention sync, reason: the worker holds no job, so jobs recorded as its are an
-- earlier process's (same worker id): give them back first].
-- Returns {jobs left in the queues, {id, input, s3Config or false}, ...}, or {-1} when
-- the worker was told to stop or is gone (it gets no new job), or while it warms up {-3}
-- (a warm-up job runs) or {-3, warm-up input index, its job id} (hand that one now).
local worker, now, n, det = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local max_bytes, bytes = tonumber(ARGV[5]), 0
if gone(worker, now) then return {-1} end  -- STOPPING: released for good
if ARGV[6] and redis.call('SCARD', P .. 'wj:' .. worker) > 0 then
  release(ARGV[6], worker, now, tonumber(ARGV[7]), ARGV[8], ARGV[9], ARGV[10])
end
beat(worker, now)
local stopping_until = redis.call('ZSCORE', P .. 'stopping', worker)
if stopping_until and tonumber(stopping_until) > now then return {-1} end  -- STOPPING
-- A worker warming up (`wu`, see beat) gets its warm-up inputs one at a time, as jobs of
-- their own (`warmup-<i>-<k>-<now>`, outside the queue and every count), then real jobs. One
-- HGET for every take: no round trip of its own. A worker that holds no job (the SDK's
-- `job_in_progress=0`, ARGV[6]) while one is handed lost it (a restart): handed again.
local warming = redis.call('HGET', P .. 'wu', worker)
if warming then
  local s = cjson.decode(warming)
  if s.d and not ARGV[6] then return {-3} end  -- WARMING: one is running
  s.k = (s.k or 0) + 1  -- handed this many times: a new id each time
  s.j, s.d = 'warmup-' .. s.i .. '-' .. s.k .. '-' .. now, now + det
  redis.call('HSET', P .. 'wu', worker, cjson.encode(s))
  return {-3, s.i, s.j}
end
local out, full = {0}, false
for _, q in ipairs({P .. 'q', P .. 'ql'}) do
  while #out <= n and not full do
    local popped = redis.call('ZPOPMIN', q)
    if #popped == 0 then break end
    local id = popped[1]
    local jk = jkey(id)
    local f = redis.call('HMGET', jk, 'st', 'in', 's3', 'et', 'cr', 'tl', 'qd', 'ah')
    if #out > 1 and bytes + #(f[2] or '') > max_bytes then
      redis.call('ZADD', q, popped[2], id)  -- it does not fit this answer: back in its place
      full = true
    elseif f[1] == 'IN_QUEUE' and tonumber(f[5]) + tonumber(f[6]) > now then
      count_queued(id, -1, #f[2])
      reindex(id, 'IN_QUEUE', 'IN_PROGRESS')
      redis.call('HSET', jk, 'st', 'IN_PROGRESS', 'sa', now, 'wk', worker,
        'ah', with_take(f[8], worker, now))
      redis.call('PEXPIREAT', jk, tonumber(f[5]) + tonumber(f[6]) + RUNNING_GRACE)
      redis.call('HINCRBY', jk, 'at', 1)
      count_interval(now, 'd' .. delay_bucket(now - (tonumber(f[7]) or now)))
      redis.call('ZADD', P .. 'run', now + (tonumber(f[4]) or det), id)
      redis.call('SADD', P .. 'wj:' .. worker, id)
      out[#out + 1] = {id, f[2], f[3]}
      bytes = bytes + #f[2]
    elseif f[1] == 'IN_QUEUE' then
      count_queued(id, -1, #(f[2] or ''))  -- past its ttl: dropped
    end
  end
end
out[1] = redis.call('ZCARD', P .. 'q') + redis.call('ZCARD', P .. 'ql')
return out
