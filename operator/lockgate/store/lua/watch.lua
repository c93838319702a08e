-- `/status?wait=`: the job's record as `JobStore.get` reads it (nil when there is none),
-- and, unless it is final, the job marked watched (`wt`): its end then publishes a `d:`
-- event (common.lua finalize), as a /runsync job's does.
-- Arguments: store/args_jobs.py Watch. Returns RECORD_FIELDS' values (status first).
local jk = jkey(id)
local f = redis.call('HMGET', jk, unpack(RECORD_FIELDS))
local st = f[1]
if not st then return nil end
if st == 'IN_QUEUE' or st == 'IN_PROGRESS' then redis.call('HSET', jk, F_WATCHED, '1') end
return f
