-- A worker is gone (exited, or silent past the heartbeat timeout): forget it and put the
-- jobs it held back at the front of the queue (counted as retried), or fail a job whose
-- attempts are used up. ARGV: ep, worker, now, max attempts, retention run, retention sync,
-- reason. Returns {requeued, failed}.
local ep, worker, now, max_attempts = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local wk = P .. 'wj:' .. worker
local requeued, failed = 0, 0
for _, id in ipairs(redis.call('SMEMBERS', wk)) do
  local jk = jkey(id)
  local f = redis.call('HMGET', jk, 'st', 'wk', 'at', 'sq', 'lp', 'sy')
  if f[1] == 'IN_PROGRESS' and f[2] == worker then
    if (tonumber(f[3]) or 0) >= max_attempts then
      finalize(ep, id, 'FAILED', now, worker, f[6], ARGV[5], ARGV[6], {'err', ARGV[7]})
      failed = failed + 1
    else
      redis.call('ZREM', P .. 'run', id)
      redis.call('HDEL', jk, 'wk', 'sa')
      redis.call('HSET', jk, 'st', 'IN_QUEUE')
      redis.call('DEL', P .. 's:' .. id)
      redis.call('ZADD', P .. (f[5] == '1' and 'ql' or 'q'), tonumber(f[4]), id)
      redis.call('HINCRBY', P .. 'stats', 'retried', 1)
      requeued = requeued + 1
    end
  end
end
redis.call('DEL', wk, P .. 'stop:' .. worker)
redis.call('ZREM', P .. 'w', worker)
if requeued > 0 then redis.call('PUBLISH', EVENTS, 'q:' .. ep) end
return {requeued, failed}
