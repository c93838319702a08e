-- Background work of one endpoint, done by whichever gateway replica gets the lock first:
-- execution timeouts, ttl expiry, workers silent past the heartbeat timeout (lost: their
-- jobs requeued or failed as the endpoint's onWorkerLost policy says, common.lua).
-- Arguments: store/args_workers.py Sweep. Returns {timed out, expired, lost workers, jobs
-- requeued, quiet}: quiet is 1 when the endpoint has nothing queued or running, no worker
-- (nor load-balancing worker or request), no webhook to send, no worker state reported and no record to expire within the horizon
-- (then its sweeps may wait for the next sign of activity: gateway/activity.py).
local function quiet()
  for _, k in ipairs({'q', 'ql', 'run', 'w', 'wh'}) do
    if redis.call('ZCARD', P .. k) > 0 then return 0 end
  end
  if redis.call('EXISTS', P .. 'ws') == 1 then return 0 end
  -- load-balancing workers registered, or requests held or in flight reported
  if redis.call('EXISTS', P .. 'lbw') == 1 or redis.call('EXISTS', P .. 'lbr') == 1 then
    return 0
  end
  local first = redis.call('ZRANGE', P .. 'exp', 0, 0, 'WITHSCORES')
  if first[2] and tonumber(first[2]) <= now + horizon then return 0 end
  return 1
end
if not redis.call('SET', P .. 'sweep', '1', 'NX', 'PX', lock_ms) then
  return {0, 0, 0, 0, quiet()}
end
local timed_out, expired, lost, requeued = 0, 0, 0, 0
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'run', '-inf', now, 'LIMIT', 0, batch)) do
  local st, wk, sy = unpack(redis.call('HMGET', jkey(id), F_STATUS, F_WORKER, F_SYNC))
  if st == 'IN_PROGRESS' then
    signal_stop(ep, wk, id)
    finalize(ep, id, 'TIMED_OUT', now, wk, sy, ret_run, ret_sync,
      {F_ERROR, 'execution timeout exceeded'})
    timed_out = timed_out + 1
  else
    redis.call('ZREM', P .. 'run', id)
  end
end
for _, id in ipairs(redis.call('ZRANGEBYSCORE', P .. 'exp', '-inf', now, 'LIMIT', 0, batch)) do
  local st, wk = unpack(redis.call('HMGET', jkey(id), F_STATUS, F_WORKER))
  if st == 'IN_PROGRESS' then
    signal_stop(ep, wk, id)
    redis.call('SREM', P .. 'wj:' .. wk, id)
  elseif st == 'IN_QUEUE' then
    count_queued(id, -1)
  end
  redis.call('ZREM', P .. 'q', id)
  redis.call('ZREM', P .. 'ql', id)
  redis.call('ZREM', P .. 'run', id)
  redis.call('ZREM', P .. 'exp', id)
  redis.call('ZREM', P .. 'wh', id)
  redis.call('UNLINK', jkey(id), P .. 's:' .. id)
  unindex(id)
  expired = expired + 1
end
-- The listing index keeps nothing older than any record can live (a safety net: records
-- leave it as they die, above).
local too_old = '(' .. string.format('%.0f', (now - INDEX_MAX_AGE) * ORDER_SLOTS)
for _, s in ipairs(STATES) do redis.call('ZREMRANGEBYSCORE', P .. 'ix:' .. s, '-inf', too_old) end
for _, w in ipairs(redis.call('ZRANGEBYSCORE', P .. 'w', '-inf', now - hb, 'LIMIT', 0, batch)) do
  local r = release(ep, w, now, max_attempts, ret_run, ret_sync, reason)
  lost, requeued = lost + 1, requeued + r[1]
end
return {timed_out, expired, lost, requeued, quiet()}
