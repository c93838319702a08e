-- /status?ttl=: a new ttl (ms, from submission). A finished job keeps its retention, which
-- the new ttl may shorten but never extend. ARGV: id, ttl, now. Returns 0 for an unknown job.
local id, ttl, now = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local jk = jkey(id)
local f = redis.call('HMGET', jk, 'st', 'cr', 'fi')
if not f[1] then return 0 end
local deadline = tonumber(f[2]) + ttl
redis.call('HSET', jk, 'tl', ttl)
redis.call('ZADD', P .. 'exp', deadline, id)
if not f[3] or deadline - now < redis.call('PTTL', jk) then
  redis.call('PEXPIREAT', jk, deadline)
end
return 1
