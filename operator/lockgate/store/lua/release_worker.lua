-- A worker is gone (its process exited, its pod was deleted): forget it, give back the
-- jobs it held (requeued or failed as the endpoint's onWorkerLost policy says, unless it
-- exited cleanly), and remember the id as gone for `gone_ms`, so that nothing speaking with
-- it any more (an orphaned heartbeat process) registers it again or keeps a job alive.
-- ARGV: ep, worker, now, max attempts, retention run, retention sync, reason, clean ("1":
-- it exited cleanly when told to stop: its jobs go back without using an attempt), gone ms
-- [, why it was marked unhealthy (JSON, models/unhealthy.py), keep ms: recorded in `un`,
-- entries older than keep ms pruned; and in `unp` (score: when) while its pod or process
-- is still there]. A release without why (its pod or process is gone) takes the id out of
-- `unp`: a marked worker counts as unhealthy in /health until its control plane saw it go.
-- Returns {requeued, failed}.
local worker, now = ARGV[2], tonumber(ARGV[3])
redis.call('ZREMRANGEBYSCORE', P .. 'gone', '-inf', now)
redis.call('ZADD', P .. 'gone', now + tonumber(ARGV[9]), worker)
redis.call('PEXPIRE', P .. 'gone', tonumber(ARGV[9]))
if ARGV[10] then
  local un = P .. 'un'
  local flat = redis.call('HGETALL', un)
  for i = 1, #flat, 2 do
    local ok, old = pcall(cjson.decode, flat[i + 1])
    if not ok or type(old) ~= 'table' or (tonumber(old.at) or 0) < now - tonumber(ARGV[11]) then
      redis.call('HDEL', un, flat[i])
    end
  end
  redis.call('HSET', un, worker, ARGV[10])
  redis.call('PEXPIRE', un, tonumber(ARGV[11]))
  redis.call('ZREMRANGEBYSCORE', P .. 'unp', '-inf', now - tonumber(ARGV[11]))
  redis.call('ZADD', P .. 'unp', now, worker)
  redis.call('PEXPIRE', P .. 'unp', tonumber(ARGV[11]))
  redis.call('PUBLISH', EVENTS, 'u:' .. ARGV[1])  -- its control plane replaces it
else
  redis.call('ZREM', P .. 'unp', worker)
end
return release(ARGV[1], worker, now, tonumber(ARGV[4]), ARGV[5], ARGV[6], ARGV[7],
  ARGV[8] == '1')
