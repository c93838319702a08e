-- A worker's job-stop poll: heartbeat, then take every pending stop signal.
-- Arguments: store/args_workers.py Stops. Returns the job ids to stop.
if gone(worker, now) then return {} end
beat(worker, now)
local sk = P .. 'stop:' .. worker
local ids = redis.call('LRANGE', sk, 0, -1)
if #ids > 0 then redis.call('DEL', sk) end
return ids
