-- A worker reports progress (runpod's progress_update) on a job it holds: the latest report
-- replaces the previous one and is shown as the job's output while it is IN_PROGRESS; the
-- job's state does not change. Arguments: store/args_jobs.py Progress. Returns 1 when
-- kept, 0 when the worker no longer holds the job.
local jk = jkey(id)
local st, wk = unpack(redis.call('HMGET', jk, F_STATUS, F_WORKER))
if st ~= 'IN_PROGRESS' or wk ~= worker then return 0 end
redis.call('HSET', jk, F_PROGRESS, progress)
return 1
