-- A worker reports a result. Ignored (returns 0) unless the job is IN_PROGRESS on this
-- worker: a late result after cancel, timeout or a requeue must not overwrite anything.
-- Returns {queued at, started at} (ms) when recorded, for the delay and execution metrics.
-- Arguments: store/args_jobs.py Finish (`fields`: field/value pairs to write).
redis.call('SREM', P .. 'wx:' .. worker, id)  -- a stopped job's handler has returned
local st, wk, sy, queued, started = unpack(redis.call('HMGET', jkey(id), F_STATUS, F_WORKER,
  F_SYNC, F_QUEUED, F_STARTED))
if st ~= 'IN_PROGRESS' or wk ~= worker then return 0 end
finalize(ep, id, status, now, worker, sy, ret_run, ret_sync, {unpack(ARGV, fields_from)})
return {tonumber(queued) or now, tonumber(started) or now}
