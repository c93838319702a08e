-- A worker takes up to n jobs, normal queue first, then lowPriority. Also a heartbeat.
-- Arguments: store/args_jobs.py Take (with `reason`, the worker holds no job, so jobs
-- recorded as its are an earlier process's (same worker id): give them back first).
-- Returns {jobs left (0: none; else at least 1, a lower bound), {id, input, s3Config or
-- false}, ...}, or {-1} when
-- the worker was told to stop or is gone (it gets no new job), or while it warms up {-3}
-- (a warm-up job runs) or {-3, warm-up input index, its job id} (hand that one now).
local bytes, holds_none = 0, reason ~= nil
-- The endpoint's workers released for good (`gone`), told to stop (`stopping`) or warming
-- up (`wu`): one EXISTS for all three, as most endpoints have none of them most of the time.
local marked = redis.call('EXISTS', P .. 'gone', P .. 'stopping', P .. 'wu') > 0
if marked and gone(worker, now) then return {-1} end  -- STOPPING: released for good
if holds_none and redis.call('SCARD', P .. 'wj:' .. worker) > 0 then
  release(ep, worker, now, max_attempts, ret_run, ret_sync, reason)
end
local warmup_started = beat(worker, now)
local stopping_until = marked and redis.call('ZSCORE', P .. 'stopping', worker)
if stopping_until and tonumber(stopping_until) > now then return {-1} end  -- STOPPING
-- A worker warming up (`wu`, see beat) gets its warm-up inputs one at a time, as jobs of
-- their own (`warmup-<i>-<k>-<now>`, outside the queue and every count), then real jobs. One
-- HGET for every take on an endpoint with warming workers: no round trip of its own. A worker that holds no job (the SDK's
-- `job_in_progress=0`: holds_none) while one is handed lost it (a restart): handed again.
local warming = (marked or warmup_started) and redis.call('HGET', P .. 'wu', worker)
if warming then
  local s = cjson.decode(warming)
  if s.d and not holds_none then return {-3} end  -- WARMING: one is running
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
    local st, input, s3, et, created, ttl, queued, log, attempts = unpack(redis.call('HMGET',
      jk, F_STATUS, F_INPUT, F_S3, F_EXEC_TIMEOUT, F_CREATED, F_TTL, F_QUEUED, F_ATTEMPT_LOG,
      F_ATTEMPTS))
    if #out > 1 and bytes + #(input or '') > max_bytes then
      redis.call('ZADD', q, popped[2], id)  -- it does not fit this answer: back in its place
      full = true
    elseif st == 'IN_QUEUE' and tonumber(created) + tonumber(ttl) > now then
      count_queued(id, -1, #input)
      reindex(id, 'IN_QUEUE', 'IN_PROGRESS')
      redis.call('HSET', jk, F_STATUS, 'IN_PROGRESS', F_STARTED, now, F_WORKER, worker,
        F_ATTEMPT_LOG, with_take(log, worker, now), F_ATTEMPTS, (tonumber(attempts) or 0) + 1)
      redis.call('PEXPIREAT', jk, tonumber(created) + tonumber(ttl) + RUNNING_GRACE)
      count_interval(now, 'd' .. delay_bucket(now - (tonumber(queued) or now)))
      redis.call('ZADD', P .. 'run', now + (tonumber(et) or det), id)
      redis.call('SADD', P .. 'wj:' .. worker, id)
      out[#out + 1] = {id, input, s3}
      bytes = bytes + #input
    elseif st == 'IN_QUEUE' then
      count_queued(id, -1, #(input or ''))  -- past its ttl: dropped
    end
  end
end
-- Whether jobs still wait (the caller wakes the next taker): the normal queue's count,
-- else the lowPriority one's; one ZCARD while a backlog lasts.
out[1] = redis.call('ZCARD', P .. 'q')
if out[1] == 0 then out[1] = redis.call('ZCARD', P .. 'ql') end
return out
