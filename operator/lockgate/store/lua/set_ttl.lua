-- /status?ttl=: a new ttl (ms, from submission). A finished job keeps its retention, which
-- the new ttl may shorten but never extend; a running job's record keeps its grace; unread
-- stream chunks die with the record. Arguments: store/args_jobs.py SetTtl. Returns 0 for
-- an unknown job.
local jk = jkey(id)
local st, created, finished = unpack(redis.call('HMGET', jk, F_STATUS, F_CREATED, F_FINISHED))
if not st then return 0 end
local deadline = tonumber(created) + ttl
redis.call('HSET', jk, F_TTL, ttl)
if st == 'IN_PROGRESS' then
  redis.call('ZADD', P .. 'exp', deadline, id)
  redis.call('PEXPIREAT', jk, deadline + RUNNING_GRACE)
elseif not finished or deadline - now < redis.call('PTTL', jk) then
  expire_at(id, deadline)
end
local sk = P .. 's:' .. id
if redis.call('EXISTS', sk) == 1 then redis.call('PEXPIRE', sk, redis.call('PTTL', jk)) end
return 1
