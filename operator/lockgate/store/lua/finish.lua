-- A worker reports a result. Ignored (returns 0) unless the job is IN_PROGRESS on this
-- worker: a late result after cancel, timeout or a requeue must not overwrite anything.
-- Returns {queued at, started at} (ms) when recorded, for the delay and execution metrics.
-- ARGV: ep, id, worker, now, status, retention run, retention sync, field/value pairs...
local ep, id, worker, now, status = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5]
redis.call('SREM', P .. 'wx:' .. worker, id)  -- a stopped job's handler has returned
local f = redis.call('HMGET', jkey(id), 'st', 'wk', 'sy', 'qd', 'sa')
if f[1] ~= 'IN_PROGRESS' or f[2] ~= worker then return 0 end
finalize(ep, id, status, now, worker, f[3], ARGV[6], ARGV[7], {unpack(ARGV, 8)})
return {tonumber(f[4]) or now, tonumber(f[5]) or now}
