-- A worker takes up to n jobs, normal queue first, then lowPriority. Also a heartbeat.
-- ARGV: worker, now, n, default execution timeout (ms)[, ep, max attempts, retention run,
-- retention sync, reason: the worker holds no job, so jobs recorded as its are an earlier
-- process's (same worker id): give them back first].
-- Returns {jobs left in the queues, {id, input, s3Config or false}, ...}, or {-1} when
-- the worker was told to stop or is gone (it gets no new job).
local worker, now, n, det = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
if gone(worker, now) then return {-1} end  -- STOPPING: released for good
if ARGV[5] and redis.call('SCARD', P .. 'wj:' .. worker) > 0 then
  release(ARGV[5], worker, now, tonumber(ARGV[6]), ARGV[7], ARGV[8], ARGV[9])
end
redis.call('ZADD', P .. 'w', now, worker)
local stopping_until = redis.call('ZSCORE', P .. 'stopping', worker)
if stopping_until and tonumber(stopping_until) > now then return {-1} end  -- STOPPING
local out = {0}
for _, q in ipairs({P .. 'q', P .. 'ql'}) do
  while #out <= n do
    local popped = redis.call('ZPOPMIN', q)
    if #popped == 0 then break end
    local id = popped[1]
    local jk = jkey(id)
    local f = redis.call('HMGET', jk, 'st', 'in', 's3', 'et', 'cr', 'tl')
    if f[1] == 'IN_QUEUE' and tonumber(f[5]) + tonumber(f[6]) > now then
      redis.call('HSET', jk, 'st', 'IN_PROGRESS', 'sa', now, 'wk', worker)
      redis.call('PEXPIREAT', jk, tonumber(f[5]) + tonumber(f[6]) + RUNNING_GRACE)
      redis.call('HINCRBY', jk, 'at', 1)
      redis.call('ZADD', P .. 'run', now + (tonumber(f[4]) or det), id)
      redis.call('SADD', P .. 'wj:' .. worker, id)
      out[#out + 1] = {id, f[2], f[3]}
    end
  end
end
out[1] = redis.call('ZCARD', P .. 'q') + redis.call('ZCARD', P .. 'ql')
return out
