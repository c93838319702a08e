-- /status?ttl=: a new ttl (ms, from submission). A finished job keeps its retention, which
-- the new ttl may shorten but never extend; a running job's record keeps its grace; unread
-- stream chunks die with the record. ARGV: id, ttl, now. Returns 0 for an unknown job.
local id, ttl, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'cr', 'fi')
if not f[1] then return 0 end
local deadline = tonumber(f[2]) + ttl
redis.call('HSET', jk, 'tl', ttl)
if f[1] == 'IN_PROGRESS' then
  redis.call('ZADD', P .. 'exp', deadline, id)
  redis.call('PEXPIREAT', jk, deadline + RUNNING_GRACE)
elseif not f[3] or deadline - now < redis.call('PTTL', jk) then
  expire_at(id, deadline)
end
local sk = P .. 's:' .. id
if redis.call('EXISTS', sk) == 1 then redis.call('PEXPIRE', sk, redis.call('PTTL', jk)) end
return 1
