-- A worker's ping without a job list: alive now, and running nothing (so no job it was told
-- to stop is still in its handler). A gone worker (see release_worker) is not registered.
-- Arguments: store/args_workers.py Heartbeat. Returns 1 when recorded, 0 for a gone worker.
if gone(worker, now) then return 0 end
beat(worker, now)
redis.call('DEL', P .. 'wx:' .. worker)
return 1
