-- A worker's ping lists the jobs it runs. A job the store says it holds, that it does not
-- list, and that it took more than `grace` ms ago never reached it (the take's reply was
-- lost): give it back (the job never ran: the endpoint's onWorkerLost policy does not
-- apply). Also a heartbeat.
-- Arguments: store/args_workers.py Reconcile (`ids`: the jobs the worker lists).
-- Jobs it was told to stop and no longer lists have left their handler; one it lists again
-- is in its handler again.
if gone(worker, now) then return 0 end
beat(worker, now)
local listed = {}
for i = ids_from, #ARGV do listed[ARGV[i]] = true end
local wx = P .. 'wx:' .. worker
for _, id in ipairs(redis.call('SMEMBERS', wx)) do
  if not listed[id] then redis.call('SREM', wx, id) end
end
-- A job it was told to stop (cancelled, timed out) and lists again: its handler started
-- after all (the runpod SDK takes a job into a queue of its own, where a cancel misses it,
-- and pings without it until the handler starts), so it is busy with it once more.
local holds = {}
for _, id in ipairs(redis.call('SMEMBERS', P .. 'wj:' .. worker)) do holds[id] = true end
for id in pairs(listed) do
  if not holds[id] then
    local st, wk = unpack(redis.call('HMGET', jkey(id), F_STATUS, F_WORKER))
    if wk == worker and (st == 'CANCELLED' or st == 'TIMED_OUT') then
      redis.call('SADD', wx, id)
    end
  end
end
if redis.call('EXISTS', wx) == 1 then redis.call('PEXPIRE', wx, STOPPED_RUNNING_MS) end
local requeued = 0
for id in pairs(holds) do
  local j = held_job(id)
  local started = tonumber(redis.call('HGET', jkey(id), F_STARTED)) or now
  if not listed[id] and j.status == 'IN_PROGRESS' and j.worker == worker and now - started > grace then
    requeued = requeued + requeue(ep, id, j, now, max_attempts, ret_run, ret_sync, reason)
  end
end
return requeued
