-- A worker is gone (its process exited, its pod was deleted): forget it, give back the
-- jobs it held (requeued or failed as the endpoint's onWorkerLost policy says, unless it
-- exited cleanly), and remember the id as gone for `gone_ms`, so that nothing speaking with
-- it any more (an orphaned heartbeat process) registers it again or keeps a job alive.
-- Arguments: store/args_workers.py ReleaseWorker (clean "1": it exited cleanly when told to
-- stop: its jobs go back without using an attempt; with `why` it was marked unhealthy (JSON,
-- models/unhealthy.py): recorded in `un`, entries older than `keep_ms` pruned; and in `unp`
-- (score: when) while its pod or process is still there). A release without why (its pod or process is gone) takes the id out of
-- `unp`: a marked worker counts as unhealthy in /health until its control plane saw it go.
-- Returns {requeued, failed}.
redis.call('ZREMRANGEBYSCORE', P .. 'gone', '-inf', now)
redis.call('ZADD', P .. 'gone', now + gone_ms, worker)
redis.call('PEXPIRE', P .. 'gone', gone_ms)
if why then
  local un = P .. 'un'
  local flat = redis.call('HGETALL', un)
  for i = 1, #flat, 2 do
    local ok, old = pcall(cjson.decode, flat[i + 1])
    if not ok or type(old) ~= 'table' or (tonumber(old.at) or 0) < now - keep_ms then
      redis.call('HDEL', un, flat[i])
    end
  end
  redis.call('HSET', un, worker, why)
  redis.call('PEXPIRE', un, keep_ms)
  redis.call('ZREMRANGEBYSCORE', P .. 'unp', '-inf', now - keep_ms)
  redis.call('ZADD', P .. 'unp', now, worker)
  redis.call('PEXPIRE', P .. 'unp', keep_ms)
  redis.call('PUBLISH', EVENTS, 'u:' .. ep)  -- its control plane replaces it
else
  redis.call('ZREM', P .. 'unp', worker)
end
return release(ep, worker, now, max_attempts, ret_run, ret_sync, reason, clean == '1')
