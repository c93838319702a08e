-- /cancel: IN_QUEUE or IN_PROGRESS -> CANCELLED; a running job's worker gets a stop signal.
-- Arguments: store/args_jobs.py Cancel.
-- Returns false for an unknown job, {1, 'CANCELLED'}, or {0, <ineligible state>}.
local st, wk, sy = unpack(redis.call('HMGET', jkey(id), F_STATUS, F_WORKER, F_SYNC))
if not st then return false end
if st == 'IN_QUEUE' then
  redis.call('ZREM', P .. 'q', id)
  redis.call('ZREM', P .. 'ql', id)
  count_queued(id, -1)
elseif st == 'IN_PROGRESS' then
  -- A removal first: a full Redis (noeviction) refuses a script's growing writes only
  -- until it made its first write, so a cancel still goes through to drain a full store.
  redis.call('ZREM', P .. 'run', id)
  signal_stop(ep, wk, id)
else
  return {0, st}
end
finalize(ep, id, 'CANCELLED', now, wk, sy, ret_run, ret_sync, {})
return {1, 'CANCELLED'}
