-- A worker reports progress (runpod's progress_update) on a job it holds: the latest report
-- replaces the previous one and is shown as the job's output while it is IN_PROGRESS; the
-- job's state does not change. ARGV: id, worker, progress JSON. Returns 1 when kept, 0 when
-- the worker no longer holds the job.
local id, worker = ARGV[1], ARGV[2]
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'wk')
if f[1] ~= 'IN_PROGRESS' or f[2] ~= worker then return 0 end
redis.call('HSET', jk, 'pg', ARGV[3])
return 1
