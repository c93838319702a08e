-- `/status?wait=`: the job's record as `JobStore.get` reads it (nil when there is none),
-- and, unless it is final, the job marked watched (`wt`): its end then publishes a `d:`
-- event (common.lua finalize), as a /runsync job's does.
-- ARGV: id, the record's field names (store/records.py JobRecord.FIELDS, status first).
local jk = jkey(ARGV[1])
local f = redis.call('HMGET', jk, unpack(ARGV, 2))
if not f[1] then return nil end
if f[1] == 'IN_QUEUE' or f[1] == 'IN_PROGRESS' then redis.call('HSET', jk, 'wt', '1') end
return f
